//! `kura keys decrypt`: recover an object's plaintext from its body as stored upstream,
//! with only the key file, the bucket and the key.
//!
//! Seekable input (a file, or stdin redirected from one) is read by random access, so a
//! range reads only its segments. A pipe is read front to back.

use std::fs::File;
use std::io::{Seek as _, Write as _};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use kura_keys::{BodyOpener, ObjectName, ObjectReader};

use super::file;
use crate::args::ObjectArgs;

/// A range as in HTTP: `A-B`, `A-` (to the end) or `-N` (the last N bytes).
enum Range {
    FromTo(u64, u64),
    From(u64),
    Last(u64),
}

fn parse_range(s: &str) -> anyhow::Result<Range> {
    let (a, b) = s
        .split_once('-')
        .with_context(|| format!("range {s:?} is not A-B, A- or -N"))?;
    let num = |x: &str| {
        x.parse::<u64>()
            .with_context(|| format!("range {s:?} is not A-B, A- or -N"))
    };
    Ok(match (a.is_empty(), b.is_empty()) {
        (false, false) => Range::FromTo(num(a)?, num(b)?),
        (false, true) => Range::From(num(a)?),
        (true, false) => Range::Last(num(b)?),
        (true, true) => bail!("range {s:?} is not A-B, A- or -N"),
    })
}

/// The inclusive byte span of `range` in an object of `size` bytes, as S3 would serve it.
fn resolve(range: &Range, size: u64) -> anyhow::Result<(u64, u64)> {
    let span = match *range {
        Range::FromTo(a, b) if a <= b && a < size => (a, b.min(size - 1)),
        Range::From(a) if a < size => (a, size - 1),
        Range::Last(n) if n > 0 && size > 0 => (size - n.min(size), size - 1),
        _ => bail!("range is not satisfiable for an object of {size} bytes"),
    };
    Ok(span)
}

fn open_input(input: Option<&Path>) -> anyhow::Result<Option<File>> {
    let path = input.unwrap_or(Path::new("/dev/stdin"));
    let opened = File::open(path);
    let seekable = |f: &File| {
        let mut f = f;
        f.stream_position().is_ok() && f.metadata().is_ok_and(|m| m.is_file())
    };
    match opened {
        Ok(f) if seekable(&f) => Ok(Some(f)),
        // stdin that is a pipe (or unopenable by path) is read front to back.
        _ if input.is_none() => Ok(None),
        Ok(_) => bail!("{} is not a regular file", path.display()),
        Err(e) => Err(e).with_context(|| format!("opening {}", path.display())),
    }
}

pub fn run(
    path: &Path,
    object: &ObjectArgs,
    range: Option<&str>,
    input: Option<&Path>,
    unchecked_part_lengths: bool,
) -> anyhow::Result<()> {
    let range = range.map(parse_range).transpose()?;
    if unchecked_part_lengths {
        eprintln!(
            "kura: part lengths go unchecked: a writer of the bucket could have put back or \
             appended parts of this object undetected"
        );
    }
    let loaded = file::load(path)?;
    let name = ObjectName::new(&object.bucket, &object.key)?;
    let mut stdout = std::io::stdout().lock();
    // No layout (a size the reader cannot tell): parts that are not all P long, with no
    // trailer listing them. A failure then may be an irregular object whose trailer was
    // never written, which the option below recovers.
    let mut layoutless = false;
    let result = if let Some(f) = open_input(input)? {
        // Of the lengths such an object can have, only one with no room for a trailer
        // (SPEC 6.1) says no trailer was written; another may hold a damaged one.
        let aligned = f.metadata().is_ok_and(|m| {
            matches!(
                kura_keys::plaintext_size(m.len()),
                Ok(kura_keys::SizeInfo::Aligned(_))
            )
        });
        let mut reader = ObjectReader::open(f, &loaded.keyring, &name)?;
        layoutless = reader.size().is_none() && aligned;
        if unchecked_part_lengths {
            reader = reader.unchecked_part_lengths();
        }
        if let Some(r) = &range {
            let (a, b) = match (reader.size(), r) {
                (Some(size), r) => resolve(r, size)?,
                // An irregular body without its trailer: only a walk tells the size.
                (None, Range::FromTo(a, b)) if a <= b => (*a, *b),
                (None, Range::From(a)) => (*a, u64::MAX),
                (None, _) => bail!(
                    "this object's size is known only by reading it whole (irregular multipart \
                     object without a layout trailer): ask for a range A-B or A-"
                ),
            };
            reader.read_range(a, b, &mut stdout)
        } else {
            reader.read_all(&mut stdout)
        }
    } else {
        let keyring = Arc::new(loaded.keyring);
        let mut opener = BodyOpener::new(keyring, object.bucket.clone(), object.key.clone());
        if unchecked_part_lengths {
            opener = opener.unchecked_part_lengths();
        }
        if let Some(r) = &range {
            return pipe_range(opener, r, &mut stdout);
        }
        kura_keys::pump(&mut std::io::stdin().lock(), &mut opener, &mut stdout)
    };
    stdout.flush()?;
    let result = result.context("decrypting (any output written so far is incomplete: discard it)");
    if layoutless && !unchecked_part_lengths {
        return result.context(
            "no trailer lists this body's parts: if it is an irregular multipart object whose \
             trailer was never written (SPEC 6.3), --unchecked-part-lengths recovers it, \
             checking everything but the part lengths",
        );
    }
    result
}

/// A range from a pipe: walk the whole body and keep the requested bytes.
fn pipe_range(
    mut opener: BodyOpener,
    range: &Range,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let (a, b) = match *range {
        Range::FromTo(a, b) if a <= b => (a, b),
        Range::From(a) => (a, u64::MAX),
        Range::FromTo(..) => bail!("range is not satisfiable"),
        Range::Last(_) => {
            bail!("a suffix range needs seekable input: redirect stdin from a file or use --input")
        }
    };
    let mut window = kura_keys::RangeWriter::new(a, b, out);
    kura_keys::pump(&mut std::io::stdin().lock(), &mut opener, &mut window)
        .context("decrypting (any output written so far is incomplete: discard it)")?;
    let size = window.position();
    if a >= size {
        bail!("range is not satisfiable for an object of {size} bytes");
    }
    Ok(())
}
