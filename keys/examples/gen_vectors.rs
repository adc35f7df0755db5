//! Writes the test vectors in `tests/vectors/` (SPEC 10). Deterministic: every key, salt and
//! nonce comes from fixed seeds, so running it again reproduces the same files.
//!
//! `cargo run -p kura-keys --features vectors --example gen_vectors -- keys/tests/vectors`
//!
//! The tests never run this; they only read the files.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test patterns wrap bytes on purpose; changing them would change every vector"
)]
#![allow(clippy::too_many_lines, reason = "the scenarios read best as one list")]

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use kura_keys::format::{FULL_SEGMENT_SIZE, HEADER_SIZE, SEGMENT_SIZE};
use kura_keys::secret::Kek;
use kura_keys::{
    Cipher, KeyEntry, KeyId, Keyring, ObjectName, ObjectSecrets, PartInfo, PartSealer, Transform,
    trailer,
};
use ring::digest::{SHA256, digest};

const KEK: [u8; 32] = [0x11; 32];
const KEY_ID: u64 = 0x6b75_7261_7665_6331; // "kuravec1"
const BUCKET: &str = "vectors";
const KEY: &str = "dir/object.bin";

fn plaintext(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn keyring(kek: [u8; 32], id: u64) -> Keyring {
    let e = KeyEntry::new(KeyId(id), "vectors".into(), Kek::from_bytes(kek));
    Keyring::new(vec![e], KeyId(id)).unwrap()
}

fn secrets(seed: u8) -> ObjectSecrets {
    let mut b = [0u8; 64];
    for (i, x) in b.iter_mut().enumerate() {
        *x = seed.wrapping_add(i as u8).wrapping_mul(7);
    }
    ObjectSecrets::from_bytes(&b)
}

/// Seals `parts` (part number, plaintext); part 1's writer records its size as `P`.
fn seal(cipher: Cipher, parts: &[(u32, Vec<u8>)], with_trailer: bool, seed: u8) -> Vec<u8> {
    seal_upload(cipher, parts, with_trailer, seed, 0)
}

/// [`seal`] for upload `upload` of each part: the same data key (from `seed`), another part
/// nonce `R` for each upload, as when a client uploads a part again.
fn seal_upload(
    cipher: Cipher,
    parts: &[(u32, Vec<u8>)],
    with_trailer: bool,
    seed: u8,
    upload: u8,
) -> Vec<u8> {
    let kr = keyring(KEK, KEY_ID);
    let name = ObjectName::new(BUCKET, KEY).unwrap();
    let s = secrets(seed);
    let pk = Arc::new(s.payload_key(cipher));
    let mut body = Vec::new();
    for (i, (n, data)) in parts.iter().enumerate() {
        let header = (i == 0).then(|| {
            let p = if parts.len() == 1 {
                0
            } else {
                data.len() as u64
            };
            s.header_for_vectors(&kr, &name, cipher, p, [seed; 12])
        });
        body.extend(
            PartSealer::for_vectors(
                &pk,
                *n,
                header,
                [seed.wrapping_add(*n as u8).wrapping_add(upload); 8],
            )
            .unwrap()
            .run(data)
            .unwrap(),
        );
    }
    if with_trailer {
        let table: Vec<PartInfo> = parts
            .iter()
            .map(|(n, d)| PartInfo {
                number: *n,
                len: d.len() as u64,
            })
            .collect();
        let t = trailer::encode_for_vectors(&pk, &table, body.len() as u64, [seed; 12]).unwrap();
        body.extend(t);
    }
    body
}

/// What a metadata vector stores beside its body (SPEC 7), and what a reader makes of it.
struct Meta {
    /// `x-amz-meta-kura-key`, if stored.
    key: Option<String>,
    /// `x-amz-meta-kura-meta`, if stored.
    sealed: Option<String>,
    /// Entries stored in the clear.
    plain: Vec<(String, String)>,
    /// `ok`, or the class of the error a reader must give.
    expect: &'static str,
    /// The pairs a reader shows, for `ok`.
    shown: Vec<(String, String)>,
}

struct Vector {
    meta: Option<Meta>,
    file: &'static str,
    expect: &'static str,
    comment: String,
    body: Vec<u8>,
    plaintext: Option<Vec<u8>>,
    range: Option<(usize, usize)>,
    /// For a vector whose whole read fails: the plaintext a read of `range` returns
    /// (SPEC 8, "What each read checks").
    range_returns: Option<Vec<u8>>,
    /// For a vector whose whole read fails only on its part lengths: the plaintext of a
    /// walk that leaves them unchecked (SPEC 6.3, recovery).
    unchecked: Option<Vec<u8>>,
    kek: [u8; 32],
    key_id: u64,
    bucket: &'static str,
    key: &'static str,
}

fn ok(
    file: &'static str,
    comment: &str,
    cipher: Cipher,
    parts: Vec<(u32, Vec<u8>)>,
    trailer: bool,
    range: Option<(usize, usize)>,
) -> Vector {
    let body = seal(cipher, &parts, trailer, file.len() as u8);
    let plain: Vec<u8> = parts.into_iter().flat_map(|(_, d)| d).collect();
    Vector {
        meta: None,
        file,
        expect: "ok",
        comment: comment.into(),
        body,
        plaintext: Some(plain),
        range,
        range_returns: None,
        unchecked: None,
        kek: KEK,
        key_id: KEY_ID,
        bucket: BUCKET,
        key: KEY,
    }
}

fn bad(file: &'static str, expect: &'static str, comment: &str, body: Vec<u8>) -> Vector {
    Vector {
        meta: None,
        file,
        expect,
        comment: comment.into(),
        body,
        plaintext: None,
        range: None,
        range_returns: None,
        unchecked: None,
        kek: KEK,
        key_id: KEY_ID,
        bucket: BUCKET,
        key: KEY,
    }
}

fn hex_sha(b: &[u8]) -> String {
    hex::encode(digest(&SHA256, b))
}

fn write(dir: &Path, v: &Vector) {
    let mut text = String::new();
    writeln!(text, "expect: {}", v.expect).unwrap();
    writeln!(text, "comment: {}", v.comment).unwrap();
    writeln!(text, "kek: {}", hex::encode(v.kek)).unwrap();
    writeln!(text, "key-id: {}", KeyId(v.key_id)).unwrap();
    writeln!(text, "bucket: {}", v.bucket).unwrap();
    writeln!(text, "key: {}", v.key).unwrap();
    if let Some(p) = &v.plaintext {
        writeln!(text, "plaintext-size: {}", p.len()).unwrap();
        writeln!(text, "plaintext-sha256: {}", hex_sha(p)).unwrap();
        if let Some((a, b)) = v.range {
            writeln!(text, "range: {a}-{b}").unwrap();
            writeln!(text, "range-sha256: {}", hex_sha(&p[a..=b])).unwrap();
        }
    }
    if let (None, Some((a, b)), Some(r)) = (&v.plaintext, v.range, &v.range_returns) {
        writeln!(text, "range: {a}-{b}").unwrap();
        writeln!(text, "range-expect: ok").unwrap();
        writeln!(text, "range-sha256: {}", hex_sha(r)).unwrap();
    }
    if let Some(u) = &v.unchecked {
        writeln!(text, "unchecked-plaintext-sha256: {}", hex_sha(u)).unwrap();
    }
    if let Some(m) = &v.meta {
        let pairs = |p: &[(String, String)]| {
            p.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(text, "metadata-expect: {}", m.expect).unwrap();
        if let Some(k) = &m.key {
            writeln!(text, "metadata-key: {k}").unwrap();
        }
        if let Some(sealed) = &m.sealed {
            writeln!(text, "metadata-sealed: {sealed}").unwrap();
        }
        if !m.plain.is_empty() {
            writeln!(text, "metadata-plain: {}", pairs(&m.plain)).unwrap();
        }
        if m.expect == "ok" {
            writeln!(text, "metadata: {}", pairs(&m.shown)).unwrap();
        }
    }
    text.push('\n');
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(&v.body);
    std::fs::write(dir.join(v.file), bytes).unwrap();
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: gen_vectors DIR");
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    let seg = SEGMENT_SIZE;
    let aes = Cipher::Aes256Gcm;
    let cha = Cipher::ChaCha20Poly1305;
    let one = |len: usize, seed: u8| vec![(1u32, plaintext(len, seed))];

    let base = seal(aes, &one(2 * seg + 100, 1), false, 9);
    let h = HEADER_SIZE;
    let full = FULL_SEGMENT_SIZE;
    let flip = |mut b: Vec<u8>, at: usize| {
        b[at] ^= 0x01;
        b
    };
    let mut vectors = vec![
        ok(
            "aes-empty",
            "empty object: one empty final segment",
            aes,
            one(0, 1),
            false,
            None,
        ),
        ok(
            "aes-1-byte",
            "one byte",
            aes,
            one(1, 2),
            false,
            Some((0, 0)),
        ),
        ok(
            "aes-64k-minus-1",
            "one short segment",
            aes,
            one(seg - 1, 3),
            false,
            Some((100, seg - 2)),
        ),
        ok(
            "aes-64k",
            "one full final segment",
            aes,
            one(seg, 4),
            false,
            Some((seg - 1, seg - 1)),
        ),
        ok(
            "aes-64k-plus-1",
            "a full segment, then a final 1-byte segment",
            aes,
            one(seg + 1, 5),
            false,
            Some((seg - 1, seg)),
        ),
        ok(
            "aes-several-segments",
            "four segments, the last short",
            aes,
            one(3 * seg + 1000, 6),
            false,
            Some((70_000, 3 * seg + 10)),
        ),
        ok(
            "chacha-empty",
            "empty object under ChaCha20-Poly1305",
            cha,
            one(0, 7),
            false,
            None,
        ),
        ok(
            "chacha-several-segments",
            "ChaCha20-Poly1305, three segments",
            cha,
            one(2 * seg + 77, 8),
            false,
            Some((5, 2 * seg + 70)),
        ),
        ok(
            "multipart-regular",
            "three parts of P = 128 KiB, the last shorter: closed-form size, no trailer",
            aes,
            vec![
                (1, plaintext(2 * seg, 10)),
                (2, plaintext(2 * seg, 11)),
                (3, plaintext(50_000, 12)),
            ],
            false,
            Some((2 * seg - 10, 4 * seg + 10)),
        ),
        ok(
            "multipart-regular-chacha",
            "two parts of P = 64 KiB under ChaCha20-Poly1305",
            cha,
            vec![(1, plaintext(seg, 13)), (2, plaintext(seg, 14))],
            false,
            Some((seg - 1, seg)),
        ),
        ok(
            "multipart-irregular",
            "parts 1, 2, 4 of 70000, 65536 and 10 bytes: trailer with the table",
            aes,
            vec![
                (1, plaintext(70_000, 15)),
                (2, plaintext(seg, 16)),
                (4, plaintext(10, 17)),
            ],
            true,
            Some((69_990, 135_540)),
        ),
        ok(
            "multipart-regular-with-trailer",
            "a regular layout that also carries a trailer (protects against dropped parts)",
            aes,
            vec![(1, plaintext(seg, 18)), (2, plaintext(100, 19))],
            true,
            Some((0, seg + 99)),
        ),
    ];

    let mut v2 = base.clone();
    v2[4] = 2;
    let mut c9 = base.clone();
    c9[5] = 9;
    let mut swapped = base[..h].to_vec();
    swapped.extend_from_slice(&base[h + full..h + 2 * full]);
    swapped.extend_from_slice(&base[h..h + full]);
    swapped.extend_from_slice(&base[h + 2 * full..]);
    let mut dup = base[..h + full].to_vec();
    dup.extend_from_slice(&base[h..]);
    let other = seal(aes, &one(2 * seg + 100, 1), false, 10);
    let mut spliced = base[..h + full].to_vec();
    spliced.extend_from_slice(&other[h + full..]);
    let irregular = seal(
        aes,
        &[
            (1, plaintext(70_000, 15)),
            (2, plaintext(seg, 16)),
            (4, plaintext(10, 17)),
        ],
        true,
        3,
    );
    let trailer_len = trailer_len_of(&irregular);
    let regular3 = seal(
        aes,
        &[
            (1, plaintext(seg, 1)),
            (2, plaintext(seg, 2)),
            (3, plaintext(9, 3)),
        ],
        true,
        4,
    );
    let mut dropped_part = regular3[..h + 2 * full].to_vec();
    dropped_part.extend_from_slice(&regular3[regular3.len() - trailer_len_of(&regular3)..]);

    vectors.extend([
        bad(
            "fail-not-kura",
            "malformed",
            "bad magic",
            flip(base.clone(), 0),
        ),
        bad(
            "fail-unsupported-version",
            "unsupported-version",
            "version byte 2",
            v2,
        ),
        bad(
            "fail-unsupported-cipher",
            "unsupported-cipher",
            "cipher ID 9",
            c9,
        ),
        bad(
            "fail-reserved-bytes",
            "malformed",
            "reserved header byte set",
            flip(base.clone(), 7),
        ),
        bad(
            "fail-header-only",
            "truncated",
            "header and nothing else",
            base[..h].to_vec(),
        ),
        bad(
            "fail-short-header",
            "truncated",
            "first 100 header bytes",
            base[..100].to_vec(),
        ),
        bad(
            "fail-tampered-header-salt",
            "tampered-header",
            "salt byte flipped",
            flip(base.clone(), 30),
        ),
        bad(
            "fail-tampered-header-part-size",
            "tampered-header",
            "part size hint changed",
            flip(base.clone(), 23),
        ),
        bad(
            "fail-tampered-wrapped-key",
            "tampered-header",
            "wrapped data key byte flipped",
            flip(base.clone(), 90),
        ),
        bad(
            "fail-tampered-commitment",
            "tampered-header",
            "commitment byte flipped",
            flip(base.clone(), 140),
        ),
        bad(
            "fail-tampered-segment",
            "tampered-segment",
            "ciphertext byte flipped in segment 1",
            flip(base.clone(), h + full + 500),
        ),
        bad(
            "fail-tampered-tag",
            "tampered-segment",
            "last tag byte flipped",
            flip(base.clone(), base.len() - 1),
        ),
        bad(
            "fail-tampered-prefix",
            "tampered-segment",
            "FINAL flag set on segment 0's prefix",
            set_final(base.clone()),
        ),
        bad(
            "fail-reordered-segments",
            "tampered-segment",
            "segments 0 and 1 swapped",
            swapped,
        ),
        bad(
            "fail-duplicated-segment",
            "tampered-segment",
            "segment 0 twice",
            dup,
        ),
        bad(
            "fail-spliced-segment",
            "tampered-segment",
            "segments 1.. from another object",
            spliced,
        ),
        bad(
            "fail-truncated-mid-segment",
            "truncated",
            "body cut inside the last segment",
            base[..base.len() - 10].to_vec(),
        ),
        bad(
            "fail-trailer-tampered",
            "tampered-segment",
            "a byte of the trailer's sealed table flipped",
            flip(irregular.clone(), irregular.len() - trailer_len + 12),
        ),
        bad(
            "fail-dropped-part-with-trailer",
            "truncated",
            "part 3 of 3 dropped, trailer kept",
            dropped_part,
        ),
    ]);
    let mut moved = bad(
        "fail-moved-object",
        "tampered-header",
        "a valid object read under another key",
        base.clone(),
    );
    moved.key = "dir/renamed.bin";
    let mut unknown = bad(
        "fail-unknown-key-id",
        "unknown-key-id",
        "the reader holds another key ID",
        base.clone(),
    );
    unknown.key_id = 0x1234;
    let mut wrong = bad(
        "fail-wrong-key",
        "wrong-key",
        "the reader holds another key under the same ID",
        base.clone(),
    );
    wrong.kek = [0x22; 32];
    vectors.extend([moved, unknown, wrong]);
    vectors.extend(read_scope_vectors(&base));
    vectors.extend(metadata_vectors());
    for v in &vectors {
        write(dir, v);
    }
    println!("wrote {} vectors", vectors.len());
}

/// SPEC 7: an object with sealed metadata, and the ways someone who can write the bucket
/// would change it. Each body is the same valid object; only what is stored beside it
/// differs.
fn metadata_vectors() -> Vec<Vector> {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let kr = keyring(KEK, KEY_ID);
    let aes = Cipher::Aes256Gcm;
    let pairs = |v: &str| vec![("owner".to_string(), v.to_string())];
    let seed = 41;
    let name = ObjectName::new(BUCKET, KEY).unwrap();
    let s = secrets(seed);
    // The header copy of the object, and of a copy of it under another name (same DK).
    let h = s.header_for_vectors(&kr, &name, aes, 0, [42; 12]);
    let copy_name = ObjectName::new(BUCKET, "dir/copy.bin").unwrap();
    let h_copy = s.header_for_vectors(&kr, &copy_name, aes, 0, [43; 12]);
    // Another object once stored under this name (another DK).
    let other = secrets(44);
    let h_other = other.header_for_vectors(&kr, &name, aes, 0, [45; 12]);
    let sealed = |s: &ObjectSecrets, h: &[u8; HEADER_SIZE], v: &str, n: u8| {
        s.seal_metadata_for_vectors(aes, h, &pairs(v), [n; 12])
            .unwrap()
    };
    let vector = |file, comment: &str, meta: Meta| {
        let mut v = ok(
            file,
            comment,
            aes,
            vec![(1, plaintext(100, seed))],
            false,
            None,
        );
        v.body = seal(aes, &[(1, plaintext(100, seed))], false, seed);
        v.meta = Some(meta);
        v
    };
    vec![
        vector(
            "meta-sealed",
            "user metadata sealed beside the object, bound to its header copy",
            Meta {
                key: Some(b64(&h)),
                sealed: Some(sealed(&s, &h, "alice", 46)),
                plain: Vec::new(),
                expect: "ok",
                shown: pairs("alice"),
            },
        ),
        vector(
            "fail-meta-from-a-copy",
            "the sealed metadata of a copy (same DK, another header copy) beside the source's header copy",
            Meta {
                key: Some(b64(&h)),
                sealed: Some(sealed(&s, &h_copy, "mallory", 47)),
                plain: Vec::new(),
                expect: "tampered-header",
                shown: Vec::new(),
            },
        ),
        vector(
            "fail-meta-stripped",
            "kura's entries removed and a value added in the clear",
            Meta {
                key: None,
                sealed: None,
                plain: pairs("attacker"),
                expect: "tampered-header",
                shown: Vec::new(),
            },
        ),
        vector(
            "fail-meta-of-another-object",
            "header copy and metadata of another object once stored under this name",
            Meta {
                key: Some(b64(&h_other)),
                sealed: Some(sealed(&other, &h_other, "mallory", 48)),
                plain: Vec::new(),
                expect: "tampered-header",
                shown: Vec::new(),
            },
        ),
    ]
}

/// SPEC 8, "What each read checks": bodies a writer of the bucket assembled from authentic
/// pieces. A whole read fails on each; where a range read cannot see the change, the vector
/// says what it returns.
fn read_scope_vectors(base: &[u8]) -> Vec<Vector> {
    let seg = SEGMENT_SIZE;
    let (h, full) = (HEADER_SIZE, FULL_SEGMENT_SIZE);
    let aes = Cipher::Aes256Gcm;
    let three = [
        (1, plaintext(2 * seg, 10)),
        (2, plaintext(2 * seg, 11)),
        (3, plaintext(50_000, 12)),
    ];
    let upload1 = seal_upload(aes, &three, false, 20, 0);
    // The client uploaded part 2 twice, the first time with other contents.
    let mut again = three.clone();
    again[1].1 = plaintext(2 * seg, 21);
    let upload0 = seal_upload(aes, &again, false, 20, 100);
    let mut mixed = upload1.clone();
    mixed[h + 3 * full..h + 4 * full].copy_from_slice(&upload0[h + 3 * full..h + 4 * full]);
    let mut mixed = bad(
        "fail-segment-of-an-earlier-upload",
        "tampered-segment",
        "part 2's segment 1 from an earlier upload of part 2 (same data key, another R); a \
         range inside that segment reads the earlier upload's plaintext",
        mixed,
    );
    mixed.range = Some((3 * seg + 5, 3 * seg + 1004));
    mixed.range_returns = Some(again[1].1[seg + 5..=seg + 1004].to_vec());

    // An earlier upload of part 2 that was one segment long.
    let mut shorter = three.clone();
    shorter[1].1 = plaintext(seg, 22);
    let short_upload = seal_upload(aes, &shorter, false, 20, 100);
    let mut another_length = upload1[..h + 2 * full].to_vec();
    another_length.extend_from_slice(&short_upload[h + 2 * full..h + 3 * full]);
    another_length.extend_from_slice(&upload1[h + 4 * full..]);

    // A part 3 the client uploaded but left out of a completion of parts 1 and 2.
    let two = [(1, plaintext(2 * seg, 10)), (2, plaintext(50_000, 12))];
    let mut appended = seal_upload(aes, &two, false, 20, 0);
    let left_out = seal_upload(aes, &three, false, 20, 100);
    appended.extend_from_slice(&left_out[h + 4 * full..]);

    let mut cut = bad(
        "fail-truncated-at-boundary",
        "truncated",
        "last segment dropped whole; a range in segment 0 does not reach the cut",
        base[..h + 2 * full].to_vec(),
    );
    cut.range = Some((0, 99));
    cut.range_returns = Some(plaintext(2 * seg + 100, 1)[..100].to_vec());
    // An irregular completion whose trailer rewrite failed (SPEC 6.3).
    let irregular = [
        (1, plaintext(70_000, 23)),
        (2, plaintext(seg, 24)),
        (3, plaintext(10, 25)),
    ];
    let mut untrailered = bad(
        "fail-irregular-without-trailer",
        "tampered-segment",
        "parts of 70000, 65536 and 10 bytes, no trailer: P = 70000 is not a multiple of \
         64 KiB and part 2 is not P long; recovery leaves part lengths unchecked",
        seal_upload(aes, &irregular, false, 20, 0),
    );
    untrailered.unchecked = Some(irregular.into_iter().flat_map(|(_, d)| d).collect());
    vec![
        untrailered,
        mixed,
        bad(
            "fail-part-of-another-length",
            "tampered-segment",
            "no trailer, P = 128 KiB: part 2 is an earlier upload of part 2 that held 64 KiB",
            another_length,
        ),
        bad(
            "fail-part-appended",
            "tampered-segment",
            "no trailer, P = 128 KiB: parts 1 and 2 (shorter than P), then a part 3 that was \
             uploaded but left out of the completion",
            appended,
        ),
        cut,
    ]
}

fn trailer_len_of(body: &[u8]) -> usize {
    let n = body.len();
    u64::from_be_bytes(body[n - 8..].try_into().unwrap()) as usize
}

/// Sets the FINAL bit in segment 0's prefix.
fn set_final(mut b: Vec<u8>) -> Vec<u8> {
    b[HEADER_SIZE + 4] |= 0x80;
    b
}
