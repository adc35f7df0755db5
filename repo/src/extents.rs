//! Files of extents that say which byte ranges of a block device matter: the ones that
//! changed since a parent snapshot (`kura backup --block --changed`) or the ones that
//! are allocated at all (`--allocated`), read from what the storage stack writes
//! (FORMAT.md section 5.4):
//!
//! - `thin_delta` XML (thin-provisioning-tools): `left_only`, `right_only` and
//!   `different` ranges of a `diff`, compact or `--verbose`, in data blocks of the
//!   pool's `data_block_size` (512-byte sectors); `same` ranges are unchanged;
//! - `thin_dump` XML: the `range_mapping` and `single_mapping` entries of one `device`;
//! - the Kubernetes CSI SnapshotMetadata service's records (`GetMetadataDelta`,
//!   `GetMetadataAllocated`) as its `snapshot-metadata-lister` writes them: JSON (a list
//!   of records with `block_metadata`, each `byte_offset` and `size_bytes`), or its table;
//! - a plain list, one `OFFSET LENGTH` pair of decimal bytes per line, `#` comments.
//!
//! The format is told from the first bytes. Every number is checked (no overflow, no
//! element or field this reader does not know), since a map read wrong is data missed.
//! CSI JSON is read in `csi_json.rs`.

use std::io::{BufRead, BufReader, Read};

use crate::error::{RepoError, Result};

mod csi_json;

/// A sector of `data_block_size`, in bytes.
const SECTOR: u64 = 512;

/// Which file the extents came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExtentsFormat {
    /// `thin_delta` XML: changes between two thin devices.
    ThinDelta,
    /// `thin_dump` XML: one thin device's mappings.
    ThinDump,
    /// CSI SnapshotMetadata records, JSON.
    CsiJson,
    /// CSI SnapshotMetadata records, the lister's table.
    CsiTable,
    /// `OFFSET LENGTH` lines.
    List,
}

impl ExtentsFormat {
    /// The name recorded in a snapshot (FORMAT.md section 8.3).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::ThinDelta => "thin_delta",
            Self::ThinDump => "thin_dump",
            Self::CsiJson => "csi",
            Self::CsiTable => "csi-table",
            Self::List => "list",
        }
    }

    /// Whether the file lists changes (`Some(true)`), allocation (`Some(false)`), or
    /// either, as the caller says (`None`: CSI records and lists look alike for both).
    #[must_use]
    pub fn lists_changes(self) -> Option<bool> {
        match self {
            Self::ThinDelta => Some(true),
            Self::ThinDump => Some(false),
            Self::CsiJson | Self::CsiTable | Self::List => None,
        }
    }
}

/// Byte ranges of a device, sorted and merged, with where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extents {
    format: ExtentsFormat,
    /// `(offset, length)`, sorted, none empty, none touching the next.
    ranges: Vec<(u64, u64)>,
    /// The volume's size as the file states it (CSI records do), if it does.
    capacity: Option<u64>,
    /// What the extents are of, where the file says: `thin:N`, the thin device of a
    /// `thin_dump`, or the newer (`right`) one of a `thin_delta`.
    of: Option<String>,
    /// What a `thin_delta`'s changes are since: `thin:N`, its older (`left`) device.
    since: Option<String>,
}

impl Extents {
    /// Parses an extents file of any of the formats above.
    ///
    /// # Errors
    /// [`RepoError::Extents`] for a file that is none of them or is malformed;
    /// [`RepoError::Io`] when it cannot be read.
    pub fn read(input: impl Read) -> Result<Self> {
        let mut input = BufReader::new(input);
        let first = loop {
            let buf = input
                .fill_buf()
                .map_err(|e| RepoError::io(std::path::Path::new("extents"), e))?;
            let Some(&b) = buf.first() else { break None };
            if b.is_ascii_whitespace() {
                input.consume(1);
            } else {
                break Some(b);
            }
        };
        match first {
            Some(b'<') => parse_thin(input),
            Some(b'[' | b'{') => csi_json::parse(input),
            Some(b'R') => parse_lines(input, ExtentsFormat::CsiTable),
            Some(b'0'..=b'9' | b'#') => parse_lines(input, ExtentsFormat::List),
            // A tool that failed leaves an empty file behind its `>`: taken for "nothing
            // changed" it would keep the parent's old data everywhere.
            None => Err(bad(
                "the file is empty (did the tool that wrote it fail?); a list of no changes \
                 says so in a comment line (`# no changes`)",
            )),
            Some(_) => Err(bad(
                "not thin_delta or thin_dump XML, CSI SnapshotMetadata records, or OFFSET LENGTH lines",
            )),
        }
    }

    /// Extents of `format` from `(offset, length)` pairs in any order.
    ///
    /// # Errors
    /// [`RepoError::Extents`] when a range ends past 2^64.
    pub fn from_ranges(
        format: ExtentsFormat,
        mut ranges: Vec<(u64, u64)>,
        capacity: Option<u64>,
    ) -> Result<Self> {
        for &(o, l) in &ranges {
            o.checked_add(l)
                .ok_or_else(|| bad(format!("the extent at {o} of {l} bytes ends past 2^64")))?;
        }
        ranges.retain(|r| r.1 > 0);
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (o, l) in ranges {
            match merged.last_mut() {
                Some((mo, ml)) if o <= *mo + *ml => *ml = (*ml).max(o + l - *mo),
                _ => merged.push((o, l)),
            }
        }
        Ok(Self {
            format,
            ranges: merged,
            capacity,
            of: None,
            since: None,
        })
    }

    /// The snapshot the extents are of (`thin:N`), where the file names it.
    #[must_use]
    pub fn of(&self) -> Option<&str> {
        self.of.as_deref()
    }

    /// The snapshot the changes are since (`thin:N`), where the file names it.
    #[must_use]
    pub fn since(&self) -> Option<&str> {
        self.since.as_deref()
    }

    /// Which file they came from.
    #[must_use]
    pub fn format(&self) -> ExtentsFormat {
        self.format
    }

    /// `(offset, length)` in bytes, sorted, merged.
    #[must_use]
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// The volume's size, where the file states it.
    #[must_use]
    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }
}

fn bad(why: impl Into<String>) -> RepoError {
    RepoError::Extents(why.into())
}

fn number(what: &str, text: &str) -> Result<u64> {
    num(what, text).map_err(bad)
}

fn num(what: &str, text: &str) -> std::result::Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("{what} {text:?} is not a whole number"))
}

/// `thin_delta` or `thin_dump` XML.
#[allow(
    clippy::too_many_lines,
    reason = "one match over the elements of both formats"
)]
fn parse_thin(input: impl BufRead) -> Result<Extents> {
    use quick_xml::events::{BytesStart, Event};

    fn maybe(e: &BytesStart<'_>, name: &str) -> Result<Option<u64>> {
        let tag = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        for a in e.attributes() {
            let a = a.map_err(|err| bad(format!("<{tag}>: {err}")))?;
            if a.key.as_ref() == name.as_bytes() {
                let v = std::str::from_utf8(&a.value)
                    .map_err(|_| bad(format!("<{tag} {name}> is not text")))?;
                return number(&format!("<{tag} {name}>"), v).map(Some);
            }
        }
        Ok(None)
    }
    fn attr(e: &BytesStart<'_>, name: &str) -> Result<u64> {
        maybe(e, name)?.ok_or_else(|| {
            bad(format!(
                "<{}> has no {name}",
                String::from_utf8_lossy(e.name().as_ref())
            ))
        })
    }

    let mut reader = quick_xml::Reader::from_reader(input);
    let mut buf = Vec::new();
    // Data block size in bytes, from <superblock>.
    let mut block: Option<u64> = None;
    let mut format: Option<ExtentsFormat> = None;
    let mut devices = 0u32;
    // The enclosing <left_only> etc. of --verbose output: whether its ranges changed.
    let mut group: Option<bool> = None;
    // (first block, blocks).
    let mut blocks: Vec<(u64, u64)> = Vec::new();
    // The elements open, innermost last: output cut off part-way leaves some open.
    let mut open: Vec<Vec<u8>> = Vec::new();
    let (mut of, mut since, mut mapped) = (None, None, None);
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| bad(format!("XML: {e}")))?;
        let (e, empty) = match &event {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(e) => {
                if open.pop().as_deref() != Some(e.name().as_ref()) {
                    return Err(bad(format!(
                        "</{}> closes an element that is not open",
                        String::from_utf8_lossy(e.name().as_ref())
                    )));
                }
                if matches!(
                    e.name().as_ref(),
                    b"left_only" | b"right_only" | b"different" | b"same"
                ) {
                    group = None;
                }
                buf.clear();
                continue;
            }
            Event::Eof => {
                if let Some(name) = open.last() {
                    return Err(bad(format!(
                        "it ends inside <{}>: cut off (did the tool stop part-way?)",
                        String::from_utf8_lossy(name)
                    )));
                }
                break;
            }
            // Declarations, comments, whitespace.
            _ => {
                buf.clear();
                continue;
            }
        };
        let name = e.name().as_ref().to_vec();
        if !empty {
            open.push(name.clone());
        }
        let want_in = |f: ExtentsFormat| -> Result<()> {
            if format == Some(f) {
                Ok(())
            } else {
                Err(bad(format!(
                    "<{}> outside the <{}> it belongs in",
                    String::from_utf8_lossy(&name),
                    if f == ExtentsFormat::ThinDelta {
                        "diff"
                    } else {
                        "device"
                    }
                )))
            }
        };
        match name.as_slice() {
            b"superblock" => {
                let sectors = attr(e, "data_block_size")?;
                if sectors == 0 {
                    return Err(bad("<superblock data_block_size> is 0"));
                }
                block = Some(
                    sectors
                        .checked_mul(SECTOR)
                        .ok_or_else(|| bad("<superblock data_block_size> is too large"))?,
                );
            }
            b"diff" => {
                if format.is_some() {
                    return Err(bad("more than one <diff> or <device>"));
                }
                format = Some(ExtentsFormat::ThinDelta);
                since = maybe(e, "left")?.map(|n| format!("thin:{n}"));
                of = maybe(e, "right")?.map(|n| format!("thin:{n}"));
            }
            b"device" => {
                if format == Some(ExtentsFormat::ThinDelta) {
                    return Err(bad("<device> inside a thin_delta <diff>"));
                }
                devices += 1;
                if devices > 1 {
                    return Err(bad(
                        "the thin_dump holds more than one device: dump only the one backed up \
                         (thin_dump --dev-id N)",
                    ));
                }
                format = Some(ExtentsFormat::ThinDump);
                of = maybe(e, "dev_id")?.map(|n| format!("thin:{n}"));
                mapped = maybe(e, "mapped_blocks")?;
            }
            b"left_only" | b"right_only" | b"different" | b"same" => {
                want_in(ExtentsFormat::ThinDelta)?;
                let changed = name.as_slice() != b"same";
                // An extent whenever it has one, written `<different .../>` or with an end
                // tag (canonical XML): only an element without one is a `--verbose` group
                // of `<range>`s. Taking the end-tag form for a group dropped its extent.
                if maybe(e, "begin")?.is_some() || empty {
                    if changed {
                        blocks.push((attr(e, "begin")?, attr(e, "length")?));
                    }
                } else {
                    group = Some(changed);
                }
            }
            b"range" => {
                want_in(ExtentsFormat::ThinDelta)?;
                let changed =
                    group.ok_or_else(|| bad("<range> outside <left_only>, <same> and the like"))?;
                if changed {
                    blocks.push((attr(e, "begin")?, attr(e, "length")?));
                }
            }
            b"range_mapping" => {
                want_in(ExtentsFormat::ThinDump)?;
                blocks.push((attr(e, "origin_begin")?, attr(e, "length")?));
            }
            b"single_mapping" => {
                want_in(ExtentsFormat::ThinDump)?;
                blocks.push((attr(e, "origin_block")?, 1));
            }
            other => {
                return Err(bad(format!(
                    "<{}> is not an element of thin_delta or thin_dump output this reader knows",
                    String::from_utf8_lossy(other)
                )));
            }
        }
        buf.clear();
    }
    let block = block.ok_or_else(|| bad("no <superblock data_block_size=...>"))?;
    if let Some(m) = mapped {
        let listed = blocks.iter().try_fold(0u64, |a, b| a.checked_add(b.1));
        if listed != Some(m) {
            return Err(bad(format!(
                "the device maps {m} blocks and the dump lists {}: incomplete",
                listed.map_or_else(|| "more than 2^64".into(), |l| l.to_string())
            )));
        }
    }
    let format =
        format.ok_or_else(|| bad("neither a thin_delta <diff> nor a thin_dump <device>"))?;
    let ranges = blocks
        .into_iter()
        .map(|(b, n)| {
            let o = b.checked_mul(block);
            let l = n.checked_mul(block);
            o.zip(l)
                .ok_or_else(|| bad(format!("blocks {b} + {n} lie past 2^64 bytes")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut extents = Extents::from_ranges(format, ranges, None)?;
    extents.of = of;
    extents.since = since;
    Ok(extents)
}

fn same_capacity(capacity: &mut Option<u64>, c: u64) -> Result<()> {
    match *capacity {
        Some(have) if have != c => Err(bad(format!(
            "records state two volume sizes, {have} and {c} bytes"
        ))),
        _ => {
            *capacity = Some(c);
            Ok(())
        }
    }
}

/// `OFFSET LENGTH` lines, or the CSI lister's table
/// (`Record# VolCapBytes BlockMetadataType ByteOffset SizeBytes`, a rule, then rows).
fn parse_lines(mut input: impl BufRead, format: ExtentsFormat) -> Result<Extents> {
    let mut ranges = Vec::new();
    let mut capacity = None;
    let mut line = String::new();
    for i in 0.. {
        line.clear();
        let read = input
            .read_line(&mut line)
            .map_err(|e| RepoError::io(std::path::Path::new("extents"), e))?;
        if read == 0 {
            break;
        }
        // The lister ends every row of its table with a line end: a last row without
        // one was cut off (the lister killed part-way), and would read as fewer changes.
        let ended = line.strip_suffix('\n');
        if ended.is_none() && format == ExtentsFormat::CsiTable && !line.trim().is_empty() {
            return Err(bad(format!(
                "line {}: it ends without a line end: cut off (did the lister stop part-way?)",
                i + 1
            )));
        }
        let whole = ended.unwrap_or(&line);
        let line = whole.strip_suffix('\r').unwrap_or(whole);
        let at = |why: String| bad(format!("line {}: {why}", i + 1));
        // `#` starts a comment in a list; the table's header is `Record#`.
        let text = if format == ExtentsFormat::List {
            line.split('#').next().unwrap_or("")
        } else {
            line
        }
        .trim();
        if text.is_empty() {
            continue;
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        if format == ExtentsFormat::CsiTable {
            {
                if fields.first() == Some(&"Record#") || fields.iter().all(|f| f.starts_with('-')) {
                    continue;
                }
                let [_, cap, _, o, l] = fields.as_slice() else {
                    return Err(at(format!(
                        "{} fields; a row of the lister's table has 5",
                        fields.len()
                    )));
                };
                same_capacity(&mut capacity, num("VolCapBytes", cap).map_err(at)?)?;
                ranges.push((
                    num("ByteOffset", o).map_err(at)?,
                    num("SizeBytes", l).map_err(at)?,
                ));
            }
        } else {
            {
                let [o, l] = fields.as_slice() else {
                    return Err(at(format!(
                        "{} fields; a line holds OFFSET LENGTH",
                        fields.len()
                    )));
                };
                ranges.push((num("offset", o).map_err(at)?, num("length", l).map_err(at)?));
            }
        }
    }
    Extents::from_ranges(format, ranges, capacity)
}
