//! Runs every file in `tests/vectors/` (SPEC 10) and checks its `expect:` line: the
//! plaintext hash for `ok`, the error class otherwise. Nothing here regenerates a vector.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use kura_keys::secret::Kek;
use kura_keys::{BodyOpener, KeyEntry, KeyId, Keyring, ObjectName, ObjectReader, Transform};
use ring::digest::{SHA256, digest};

struct Vector {
    name: String,
    fields: HashMap<String, String>,
    body: Vec<u8>,
}

fn load(path: &Path) -> Vector {
    let raw = std::fs::read(path).unwrap();
    let split = raw
        .windows(2)
        .position(|w| w == b"\n\n")
        .expect("header ends with an empty line");
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let fields = head
        .lines()
        .map(|l| {
            let (k, v) = l
                .split_once(": ")
                .unwrap_or_else(|| (l.trim_end_matches(':'), ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    Vector {
        name: path.file_name().unwrap().to_string_lossy().into(),
        fields,
        body: raw[split + 2..].to_vec(),
    }
}

fn keyring(v: &Vector) -> Keyring {
    let kek: [u8; 32] = hex::decode(&v.fields["kek"]).unwrap().try_into().unwrap();
    let id: KeyId = v.fields["key-id"].parse().unwrap();
    Keyring::new(
        vec![KeyEntry::new(id, String::new(), Kek::from_bytes(kek))],
        id,
    )
    .unwrap()
}

fn sha(b: &[u8]) -> String {
    hex::encode(digest(&SHA256, b))
}

fn check(v: &Vector) -> Result<(), String> {
    let kr = Arc::new(keyring(v));
    let (bucket, key) = (&v.fields["bucket"], &v.fields["key"]);
    let expect = v.fields["expect"].as_str();
    // The streaming reader, fed in uneven pieces to exercise every buffering path.
    let mut opener = BodyOpener::new(kr.clone(), bucket.clone(), key.clone());
    let mut out = kura_keys::Output::new();
    let mut result = Ok(());
    for piece in v.body.chunks(7919) {
        result = opener.update(piece, &mut out);
        if result.is_err() {
            break;
        }
    }
    let result = result.and_then(|()| opener.finish(&mut out));
    let name = ObjectName::new(bucket, key).unwrap();
    let random_access = ObjectReader::open(Cursor::new(&v.body), &kr, &name);
    match (expect, result) {
        ("ok", Ok(())) => {
            if sha(&out) != v.fields["plaintext-sha256"] {
                return Err("plaintext hash differs".into());
            }
            let mut r = random_access.map_err(|e| format!("random access failed: {e}"))?;
            if r.size().map(|s| s.to_string()).as_ref() != Some(&v.fields["plaintext-size"]) {
                return Err(format!("size {:?} from the ciphertext size", r.size()));
            }
            let mut all = Vec::new();
            r.read_all(&mut all).map_err(|e| e.to_string())?;
            if sha(&all) != v.fields["plaintext-sha256"] {
                return Err("read_all hash differs".into());
            }
            if let Some(range) = v.fields.get("range") {
                let (a, b) = range.split_once('-').unwrap();
                let mut part = Vec::new();
                r.read_range(a.parse().unwrap(), b.parse().unwrap(), &mut part)
                    .map_err(|e| e.to_string())?;
                if sha(&part) != v.fields["range-sha256"] {
                    return Err("range hash differs".into());
                }
            }
            Ok(())
        }
        ("ok", Err(e)) => Err(format!("expected ok, got {} ({e})", e.class())),
        (class, Ok(())) => Err(format!("expected {class}, but it opened")),
        (class, Err(e)) if e.class() == class => {
            // Random access must fail too, in the same class when it gets as far as the
            // header, and in any class otherwise (it reads the size first), and it must
            // not write out more of the body than the streaming reader did before its
            // error (found by review, 2026-12-08: `kura keys decrypt` wrote an appended
            // part's plaintext before it failed, which a GET never sends).
            let also_fails = match random_access {
                Err(_) => true,
                Ok(mut r) => {
                    let mut got = Vec::new();
                    let failed = r.read_all(&mut got).is_err();
                    let sized = sized_walk(v, &kr);
                    if got.len() > sized {
                        return Err(format!(
                            "random access wrote {} bytes before failing, a reader that \
                             knows the body's length (the gateway's) {sized}",
                            got.len(),
                        ));
                    }
                    failed
                }
            };
            if !also_fails {
                return Err("random access read it without error".into());
            }
            unchecked_walk(v, &kr)?;
            range_of_a_failing_body(v, &kr)
        }
        (class, Err(e)) => Err(format!("expected {class}, got {} ({e})", e.class())),
    }
}

/// How many bytes of `v`'s plaintext a streaming reader that knows the body's length, as
/// the gateway's GET does, writes before it fails (SPEC 5.2: with the length it knows
/// whether a trailer may follow, so a part after one shorter than P fails at its start).
fn sized_walk(v: &Vector, kr: &Arc<Keyring>) -> usize {
    let trailer = matches!(
        kura_keys::layout::plaintext_size(v.body.len() as u64),
        Ok(kura_keys::layout::SizeInfo::Trailer)
    );
    let (bucket, key) = (&v.fields["bucket"], &v.fields["key"]);
    let mut opener =
        BodyOpener::new(kr.clone(), bucket.clone(), key.clone()).expect_trailer(trailer);
    let mut out = kura_keys::Output::new();
    let _ = opener
        .update(&v.body, &mut out)
        .and_then(|()| opener.finish(&mut out));
    out.len()
}

/// A body that fails only on its part lengths opens to `unchecked-plaintext-sha256:` when
/// they go unchecked (SPEC 6.3, recovery), by the streaming and the random-access reader.
fn unchecked_walk(v: &Vector, kr: &Arc<Keyring>) -> Result<(), String> {
    let Some(want) = v.fields.get("unchecked-plaintext-sha256") else {
        return Ok(());
    };
    let (bucket, key) = (&v.fields["bucket"], &v.fields["key"]);
    let mut opener =
        BodyOpener::new(kr.clone(), bucket.clone(), key.clone()).unchecked_part_lengths();
    let mut out = kura_keys::Output::new();
    opener
        .update(&v.body, &mut out)
        .and_then(|()| opener.finish(&mut out))
        .map_err(|e| format!("unchecked walk: {e}"))?;
    let name = ObjectName::new(bucket, key).unwrap();
    let mut all = Vec::new();
    ObjectReader::open(Cursor::new(&v.body), kr, &name)
        .and_then(|r| r.unchecked_part_lengths().read_all(&mut all))
        .map_err(|e| format!("unchecked random access: {e}"))?;
    if sha(&out) != *want || sha(&all) != *want {
        return Err("unchecked plaintext hash differs".into());
    }
    Ok(())
}

/// What a range read makes of a body whose whole read fails (`range-expect:`): SPEC 8,
/// "What each read checks", says which changes a range read cannot see.
fn range_of_a_failing_body(v: &Vector, kr: &Keyring) -> Result<(), String> {
    let Some(expect) = v.fields.get("range-expect") else {
        return Ok(());
    };
    let (a, b) = v.fields["range"].split_once('-').unwrap();
    let name = ObjectName::new(&v.fields["bucket"], &v.fields["key"]).unwrap();
    let mut part = Vec::new();
    let got = ObjectReader::open(Cursor::new(&v.body), kr, &name)
        .and_then(|mut r| r.read_range(a.parse().unwrap(), b.parse().unwrap(), &mut part));
    match (expect.as_str(), got) {
        ("ok", Ok(())) if sha(&part) == v.fields["range-sha256"] => Ok(()),
        ("ok", Ok(())) => Err("range hash differs".into()),
        (class, Err(e)) if e.class() == class => Ok(()),
        (class, got) => Err(format!("range read: expected {class}, got {got:?}")),
    }
}

/// What a reader shows of a vector's metadata (SPEC 7), or the class of its error: the
/// body's header verified first, then the header copy, which must wrap the same data key,
/// then the sealed metadata, bound to that copy. Nothing stored in the clear is shown.
fn read_metadata(v: &Vector) -> Result<Vec<(String, String)>, kura_keys::Error> {
    use base64::Engine as _;
    use kura_keys::format::HEADER_SIZE;
    let kr = keyring(v);
    let name = ObjectName::new(&v.fields["bucket"], &v.fields["key"]).unwrap();
    let body = kura_keys::Header::parse(&v.body[..HEADER_SIZE])?.verify(&kr, &name)?;
    let tampered = kura_keys::Error::TamperedHeader;
    let Some(copy) = v.fields.get("metadata-key") else {
        return Err(tampered);
    };
    let copy: [u8; HEADER_SIZE] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(copy)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(tampered)?;
    let verified = kura_keys::Header::parse(&copy)?.verify(&kr, &name)?;
    if verified.secrets().commitment() != body.secrets().commitment() {
        return Err(kura_keys::Error::TamperedHeader);
    }
    match v.fields.get("metadata-sealed") {
        None => Ok(Vec::new()),
        Some(sealed) => verified
            .secrets()
            .open_metadata(verified.header().cipher(), &copy, sealed),
    }
}

#[test]
fn metadata_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let v = load(&entry.unwrap().path());
        let Some(expect) = v.fields.get("metadata-expect") else {
            continue;
        };
        seen += 1;
        match (expect.as_str(), read_metadata(&v)) {
            ("ok", Ok(pairs)) => {
                let shown: Vec<String> = pairs.iter().map(|(k, x)| format!("{k}={x}")).collect();
                assert_eq!(shown.join(", "), v.fields["metadata"], "{}", v.name);
            }
            (class, Err(e)) => assert_eq!(e.class(), class, "{}: {e}", v.name),
            (class, Ok(pairs)) => panic!("{}: expected {class}, showed {pairs:?}", v.name),
        }
    }
    assert!(seen >= 4, "metadata vectors missing from {}", dir.display());
}

#[test]
fn all_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "vectors missing from {}", dir.display());
    println!("AES-256-GCM on {}", kura_keys::AesBackend::active().name());
    let failures: Vec<String> = paths
        .iter()
        .map(|p| load(p))
        .filter_map(|v| check(&v).err().map(|e| format!("{}: {e}", v.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} vectors failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The vectors on both AES-256-GCM backends, whichever this CPU picks: `all_vectors` again
/// in a child process of this test binary with `KURA_AES_BACKEND` set.
#[test]
fn all_vectors_on_each_aes_backend() {
    for backend in [kura_keys::AesBackend::AwsLc, kura_keys::AesBackend::Ring] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["all_vectors", "--exact", "--nocapture", "--test-threads=1"])
            .env(kura_keys::AES_BACKEND_ENV, backend.name())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {stdout}{}",
            backend.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        let used = format!("AES-256-GCM on {}", backend.name());
        assert!(stdout.contains(&used), "{used} not in {stdout}");
        assert!(stdout.contains("1 passed"), "{stdout}");
    }
}

#[test]
fn every_error_class_has_a_vector() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let classes: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| load(&e.unwrap().path()).fields["expect"].clone())
        .collect();
    for c in [
        "ok",
        "malformed",
        "unsupported-version",
        "unsupported-cipher",
        "unknown-key-id",
        "wrong-key",
        "tampered-header",
        "tampered-segment",
        "truncated",
    ] {
        assert!(classes.iter().any(|x| x == c), "no vector expects {c}");
    }
}
