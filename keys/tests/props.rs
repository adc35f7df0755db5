//! Property tests: round trips for random sizes, layouts and ranges; any flipped bit and
//! any truncation fails.

#![allow(
    clippy::cast_possible_truncation,
    reason = "sizes in these tests are a few hundred KiB"
)]

mod common;

use std::io::Cursor;
use std::sync::Arc;

use common::{keyring, seal_multipart, seal_single};
use futures::StreamExt as _;
use kura_keys::{BodyOpener, Cipher, ObjectName, ObjectReader, Transform};
use kura_testkit::data::pseudo_random;
use proptest::prelude::*;

const SEG: usize = 65_536;

fn open_all(kr: &Arc<kura_keys::Keyring>, body: &[u8]) -> kura_keys::Result<Vec<u8>> {
    BodyOpener::new(kr.clone(), "b".into(), "k".into()).run(body)
}

fn cipher() -> impl Strategy<Value = Cipher> {
    prop_oneof![Just(Cipher::Aes256Gcm), Just(Cipher::ChaCha20Poly1305)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn single_part_round_trip_and_ranges(len in 0usize..4 * SEG + 100, c in cipher(), a in any::<u64>(), b in any::<u64>()) {
        let kr = Arc::new(keyring());
        let data = pseudo_random(len, len as u64);
        let body = seal_single(&kr, "b", "k", c, &data);
        prop_assert_eq!(Some(body.len() as u64), kura_keys::ciphertext_size(len as u64));
        prop_assert_eq!(open_all(&kr, &body).unwrap(), data.clone());
        let name = ObjectName::new("b", "k").unwrap();
        let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name).unwrap();
        prop_assert_eq!(r.size(), Some(len as u64));
        if len > 0 {
            let (s, e) = { let s = a % len as u64; let e = s + b % (len as u64 - s); (s, e) };
            let mut out = Vec::new();
            r.read_range(s, e, &mut out).unwrap();
            prop_assert_eq!(&out[..], &data[s as usize..=e as usize]);
        }
    }

    #[test]
    fn multipart_round_trip_and_ranges(
        segs_per_part in 1usize..4, last in 0usize..3 * SEG, nparts in 1usize..5,
        c in cipher(), trailer in any::<bool>(), a in any::<u64>(), b in any::<u64>(),
    ) {
        let kr = Arc::new(keyring());
        let p = segs_per_part * SEG;
        let datas: Vec<Vec<u8>> = (0..nparts).map(|i| pseudo_random(if i + 1 == nparts { last.min(p) } else { p }, i as u64)).collect();
        let parts: Vec<(u32, &[u8])> = datas.iter().enumerate().map(|(i, d)| (i as u32 + 1, d.as_slice())).collect();
        let body = seal_multipart(&kr, "b", "k", c, &parts, trailer);
        let whole = datas.concat();
        prop_assert_eq!(open_all(&kr, &body).unwrap(), whole.clone());
        let name = ObjectName::new("b", "k").unwrap();
        let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name).unwrap();
        prop_assert_eq!(r.size(), Some(whole.len() as u64));
        if !whole.is_empty() {
            let n = whole.len() as u64;
            let (s, e) = { let s = a % n; (s, s + b % (n - s)) };
            let mut out = Vec::new();
            r.read_range(s, e, &mut out).unwrap();
            prop_assert_eq!(&out[..], &whole[s as usize..=e as usize]);
        }
    }

    #[test]
    fn irregular_parts_round_trip(sizes in proptest::collection::vec(1usize..2 * SEG + 7, 1..5), c in cipher(), a in any::<u64>()) {
        let kr = Arc::new(keyring());
        let datas: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &s)| pseudo_random(s, i as u64 + 7)).collect();
        let parts: Vec<(u32, &[u8])> = datas.iter().enumerate().map(|(i, d)| (2 * i as u32 + 1, d.as_slice())).collect();
        let body = seal_multipart(&kr, "b", "k", c, &parts, true);
        let whole = datas.concat();
        prop_assert_eq!(open_all(&kr, &body).unwrap(), whole.clone());
        let name = ObjectName::new("b", "k").unwrap();
        let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name).unwrap();
        prop_assert_eq!(r.size(), Some(whole.len() as u64));
        let s = a % whole.len() as u64;
        let mut out = Vec::new();
        r.read_range(s, whole.len() as u64 - 1, &mut out).unwrap();
        prop_assert_eq!(&out[..], &whole[s as usize..]);
    }

    #[test]
    fn any_flipped_bit_fails(len in 0usize..2 * SEG + 50, bit in any::<u64>(), multipart in any::<bool>()) {
        let kr = Arc::new(keyring());
        let data = pseudo_random(len, 3);
        let mut body = if multipart {
            let (a, b) = data.split_at(len.min(SEG));
            seal_multipart(&kr, "b", "k", Cipher::Aes256Gcm, &[(1, a), (2, b)], true)
        } else {
            seal_single(&kr, "b", "k", Cipher::Aes256Gcm, &data)
        };
        let bit = bit % (body.len() as u64 * 8);
        body[(bit / 8) as usize] ^= 1 << (bit % 8);
        prop_assert!(open_all(&kr, &body).is_err());
        let name = ObjectName::new("b", "k").unwrap();
        let ok = ObjectReader::open(Cursor::new(&body), &kr, &name).and_then(|mut r| { let mut o = Vec::new(); r.read_all(&mut o).map(|()| o) });
        prop_assert!(ok.is_err());
    }

    #[test]
    fn any_truncation_fails(len in 0usize..3 * SEG, cut in any::<u64>(), multipart in any::<bool>()) {
        let kr = Arc::new(keyring());
        let data = pseudo_random(len, 5);
        let body = if multipart {
            let (a, b) = data.split_at(len.min(SEG));
            seal_multipart(&kr, "b", "k", Cipher::ChaCha20Poly1305, &[(1, a), (2, b)], false)
        } else {
            seal_single(&kr, "b", "k", Cipher::ChaCha20Poly1305, &data)
        };
        let keep = (cut % body.len() as u64) as usize;
        prop_assert!(open_all(&kr, &body[..keep]).is_err());
    }

    /// `transform_stream` hands each batch on as the buffer it was written into and takes
    /// it back once dropped: batches still held must never change (the sealed stream is
    /// kept whole before it is opened), and buffers that come back must not leak old bytes
    /// into new batches (the opened stream drops each batch as it goes).
    #[test]
    fn streams_in_any_chunking_round_trip(len in 0usize..12 * SEG, step in 1usize..3 * SEG, c in cipher()) {
        let kr = Arc::new(keyring());
        let data = pseudo_random(len, 11);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let name = ObjectName::new("b", "k").unwrap();
        let sealer = kura_keys::PartSealer::single_part(&kr, &name, c).unwrap();
        let held: Vec<bytes::Bytes> = rt.block_on(
            kura_keys::transform_stream(chunks(&data, step), sealer).map(Result::unwrap).collect(),
        );
        let body = held.concat();
        prop_assert_eq!(open_all(&kr, &body).unwrap(), data.clone());
        let opener = BodyOpener::new(kr.clone(), "b".into(), "k".into());
        let opened = rt.block_on(
            kura_keys::transform_stream(chunks(&body, step / 2 + 1), opener)
                .fold(Vec::new(), |mut v, b| async move { v.extend_from_slice(&b.unwrap()); v }),
        );
        prop_assert_eq!(opened, data);
    }
}

/// `data` as a stream of `step`-byte chunks.
fn chunks(
    data: &[u8],
    step: usize,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin + Send {
    let pieces: Vec<_> = data
        .chunks(step)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces)
}

#[test]
fn moved_object_fails_as_tampered_header() {
    let kr = Arc::new(keyring());
    let body = seal_single(&kr, "b", "k", Cipher::Aes256Gcm, b"hello");
    let err = BodyOpener::new(kr.clone(), "b".into(), "other".into())
        .run(&body)
        .unwrap_err();
    assert_eq!(err.class(), "tampered-header");
    let err = BodyOpener::new(kr, "b2".into(), "k".into())
        .run(&body)
        .unwrap_err();
    assert_eq!(err.class(), "tampered-header");
}

#[test]
fn rewrap_keeps_the_body_and_moves_the_binding() {
    let mut kr = keyring();
    let body = seal_single(&kr, "b", "k", Cipher::Aes256Gcm, b"rotate me");
    let header = kura_keys::Header::parse(&body).unwrap();
    let verified = header
        .verify(&kr, &ObjectName::new("b", "k").unwrap())
        .unwrap();
    kr.rotate("later".into()).unwrap();
    let new_header = verified
        .rewrap(&kr, &ObjectName::new("b", "renamed").unwrap())
        .unwrap();
    let mut moved = new_header.to_vec();
    moved.extend_from_slice(&body[kura_keys::format::HEADER_SIZE..]);
    let kr = Arc::new(kr);
    let out = BodyOpener::new(kr.clone(), "b".into(), "renamed".into())
        .run(&moved)
        .unwrap();
    assert_eq!(out, b"rotate me");
    assert_eq!(
        kura_keys::Header::parse(&moved).unwrap().key_id(),
        kr.active().id
    );
    assert!(
        BodyOpener::new(kr, "b".into(), "k".into())
            .run(&moved)
            .is_err()
    );
}

#[test]
fn dropped_middle_part_fails() {
    let kr = Arc::new(keyring());
    let d = pseudo_random(3 * SEG, 1);
    let body = seal_multipart(
        &kr,
        "b",
        "k",
        Cipher::Aes256Gcm,
        &[(1, &d[..SEG]), (2, &d[SEG..2 * SEG]), (3, &d[2 * SEG..])],
        false,
    );
    let full = kura_keys::format::FULL_SEGMENT_SIZE;
    let h = kura_keys::format::HEADER_SIZE;
    let mut cut = body[..h + full].to_vec();
    cut.extend_from_slice(&body[h + 2 * full..]);
    assert_eq!(open_all(&kr, &cut).unwrap_err().class(), "tampered-segment");
}

#[test]
fn sealed_metadata_round_trips_and_is_bound_to_its_object() {
    let a = kura_keys::ObjectSecrets::generate().unwrap();
    let b = kura_keys::ObjectSecrets::generate().unwrap();
    let pairs = vec![
        ("Owner".to_string(), "velero".to_string()),
        ("a".to_string(), String::new()),
    ];
    // Two header copies of one object, as an object and its copy have: same data key.
    let header = [7u8; kura_keys::format::HEADER_SIZE];
    let other_header = [8u8; kura_keys::format::HEADER_SIZE];
    let sealed = a.seal_metadata(Cipher::Aes256Gcm, &header, &pairs).unwrap();
    let mut opened = a
        .open_metadata(Cipher::Aes256Gcm, &header, &sealed)
        .unwrap();
    opened.sort();
    assert_eq!(
        opened,
        vec![
            ("a".to_string(), String::new()),
            ("owner".to_string(), "velero".to_string())
        ]
    );
    assert_eq!(
        b.open_metadata(Cipher::Aes256Gcm, &header, &sealed)
            .unwrap_err()
            .class(),
        "tampered-header"
    );
    assert_eq!(
        a.open_metadata(Cipher::Aes256Gcm, &other_header, &sealed)
            .unwrap_err()
            .class(),
        "tampered-header",
        "bound to its header copy, not only to the data key"
    );
}

#[test]
fn passphrase_sealed_key_file_round_trips() {
    let kr = keyring();
    let pass = kura_keys::secret::Passphrase::new("correct horse".into());
    let text = kr.to_sealed_toml(&pass).unwrap();
    assert!(kura_keys::keyfile::is_sealed(&text).unwrap());
    assert!(
        !text.contains(&kr.active().id.to_string()),
        "sealed file must not show key IDs in the clear"
    );
    let back = kura_keys::Keyring::from_toml(&text, Some(&pass)).unwrap();
    assert_eq!(back.active().id, kr.active().id);
    let wrong = kura_keys::secret::Passphrase::new("wrong".into());
    assert!(matches!(
        kura_keys::Keyring::from_toml(&text, Some(&wrong)),
        Err(kura_keys::Error::WrongPassphrase)
    ));
}

/// Regression for a nonce reuse: S3 lets a client upload a part number twice with other
/// data. Each upload must get its own key, and segments of the two uploads must not mix.
#[test]
fn reuploaded_part_gets_a_fresh_key_and_cannot_be_mixed() {
    let kr = Arc::new(keyring());
    let secrets = kura_keys::ObjectSecrets::generate().unwrap();
    let pk = Arc::new(secrets.payload_key(Cipher::Aes256Gcm));
    let name = ObjectName::new("b", "k").unwrap();
    let header = secrets.header(&kr, &name, Cipher::Aes256Gcm, 0).unwrap();
    let a = vec![0u8; 2 * SEG];
    let b = vec![1u8; 2 * SEG];
    let first = kura_keys::PartSealer::new(&pk, 1, Some(header))
        .unwrap()
        .run(&a)
        .unwrap();
    let second = kura_keys::PartSealer::new(&pk, 1, Some(header))
        .unwrap()
        .run(&b)
        .unwrap();
    let h = kura_keys::format::HEADER_SIZE;
    let full = kura_keys::format::FULL_SEGMENT_SIZE;
    let p = kura_keys::format::SEGMENT_PREFIX_SIZE;
    // Same plaintext position, same nonce fields: under one key, ciphertext XOR would leak
    // a XOR b. With per-upload keys the keystreams differ.
    let xa: Vec<u8> = first[h + p..h + p + 64]
        .iter()
        .zip(&second[h + p..h + p + 64])
        .map(|(x, y)| x ^ y)
        .collect();
    assert_ne!(xa, vec![1u8; 64], "two uploads of a part share a keystream");
    assert_eq!(open_all(&kr, &first).unwrap(), a);
    assert_eq!(open_all(&kr, &second).unwrap(), b);
    let mut mixed = first[..h + full].to_vec();
    mixed.extend_from_slice(&second[h + full..]);
    assert_eq!(
        open_all(&kr, &mixed).unwrap_err().class(),
        "tampered-segment"
    );
}

/// Regression: a header split after its fifth byte (`KURA` and the version) was rejected.
#[test]
fn byte_at_a_time_input_opens() {
    let kr = Arc::new(keyring());
    let data = pseudo_random(SEG + 3, 9);
    let body = seal_single(&kr, "b", "k", Cipher::Aes256Gcm, &data);
    let mut o = BodyOpener::new(kr, "b".into(), "k".into());
    let mut out = kura_keys::Output::new();
    for b in &body {
        o.update(std::slice::from_ref(b), &mut out).unwrap();
    }
    o.finish(&mut out).unwrap();
    assert_eq!(&out[..], &data[..]);
}

/// An irregular body whose trailer was never written (its completion failed before the
/// rewrite) has parts that are not `P` long, which SPEC 5.2 refuses, so that a part put
/// back from an earlier upload of another length cannot pass (SPEC 6.3); a reader asked to
/// leave part lengths unchecked recovers it, front to back and for a range.
#[test]
fn an_irregular_body_without_its_trailer_opens_only_with_lengths_unchecked() {
    let kr = Arc::new(keyring());
    let d = pseudo_random(70_000 + 65_536 + 10, 4);
    let body = seal_multipart(
        &kr,
        "b",
        "k",
        Cipher::Aes256Gcm,
        &[
            (1, &d[..70_000]),
            (2, &d[70_000..135_536]),
            (3, &d[135_536..]),
        ],
        false,
    );
    assert!(matches!(
        open_all(&kr, &body),
        Err(kura_keys::Error::TamperedSegment { part: 2, .. })
    ));
    let unchecked = BodyOpener::new(kr.clone(), "b".into(), "k".into())
        .unchecked_part_lengths()
        .run(&body)
        .unwrap();
    assert_eq!(unchecked, d);
    let name = ObjectName::new("b", "k").unwrap();
    let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name).unwrap();
    assert_eq!(
        r.size(),
        None,
        "the size of an untrailered irregular body is unknown"
    );
    assert!(r.read_range(69_990, 70_010, &mut Vec::new()).is_err());
    let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name)
        .unwrap()
        .unchecked_part_lengths();
    let mut out = Vec::new();
    r.read_range(69_990, 70_010, &mut out).unwrap();
    assert_eq!(out, &d[69_990..=70_010]);
}

/// Found by the final review (2026-12-08): an irregular body whose trailer was never
/// written can have any length, also one in the class a trailer gives (SPEC 6.1); the
/// reader took such a length for a trailer it had not found, and `read_all` with part
/// lengths unchecked, the recovery, failed as truncated.
#[test]
fn an_untrailered_body_whose_length_looks_trailered_is_still_recovered() {
    use kura_keys::format::HEADER_SIZE;
    let kr = Arc::new(keyring());
    let first = 70_000u64;
    let ct = |n: u64| kura_keys::part_ciphertext_len(n).unwrap();
    let second = (1..2 * SEG as u64)
        .find(|&n| {
            let len = HEADER_SIZE as u64 + ct(first) + ct(n);
            matches!(
                kura_keys::plaintext_size(len),
                Ok(kura_keys::SizeInfo::Trailer)
            )
        })
        .expect("a length in the trailer class");
    let d = pseudo_random(usize::try_from(first + second).unwrap(), 9);
    let split = usize::try_from(first).unwrap();
    let body = seal_multipart(
        &kr,
        "b",
        "k",
        Cipher::Aes256Gcm,
        &[(1, &d[..split]), (2, &d[split..])],
        false,
    );
    let name = ObjectName::new("b", "k").unwrap();
    let mut out = Vec::new();
    ObjectReader::open(Cursor::new(&body), &kr, &name)
        .unwrap()
        .unchecked_part_lengths()
        .read_all(&mut out)
        .unwrap();
    assert!(out == d, "recovered whole");
}

/// Aligned parts of unequal sizes: the size is right but the part size hint is not; the
/// reader notices at the part boundary and walks, and the walk refuses part 2 (not `P`
/// long) unless part lengths go unchecked.
#[test]
fn aligned_unequal_parts_without_trailer_open_only_with_lengths_unchecked() {
    let kr = Arc::new(keyring());
    let d = pseudo_random(3 * SEG + 5, 8);
    let body = seal_multipart(
        &kr,
        "b",
        "k",
        Cipher::Aes256Gcm,
        &[
            (1, &d[..2 * SEG]),
            (2, &d[2 * SEG..3 * SEG]),
            (3, &d[3 * SEG..]),
        ],
        false,
    );
    let name = ObjectName::new("b", "k").unwrap();
    let (a, b) = (2 * SEG as u64 - 1, 3 * SEG as u64 + 1);
    let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name).unwrap();
    assert!(r.read_range(a, b, &mut Vec::new()).is_err());
    let mut r = ObjectReader::open(Cursor::new(&body), &kr, &name)
        .unwrap()
        .unchecked_part_lengths();
    let mut out = Vec::new();
    r.read_range(a, b, &mut out).unwrap();
    assert_eq!(out, &d[2 * SEG - 1..=3 * SEG + 1]);
}

/// A whole-body read told the parts beforehand (the gateway reads the trailer first) stops
/// at the first part that is not the next one listed, or not of its listed length, before
/// any of that part's plaintext is out; without the table the mismatch shows only at the
/// trailer, after the misplaced part's plaintext.
#[test]
fn a_body_unlike_the_parts_expected_stops_before_the_first_difference() {
    use kura_keys::PartInfo;
    let kr = Arc::new(keyring());
    let (a, b, c) = (
        pseudo_random(SEG + 100, 11),
        pseudo_random(5_000, 12),
        // As long as part 2: only its number tells it from part 2.
        pseudo_random(5_000, 13),
    );
    let listed = |parts: &[(u32, &Vec<u8>)]| -> Vec<PartInfo> {
        parts
            .iter()
            .map(|(number, d)| PartInfo {
                number: *number,
                len: d.len() as u64,
            })
            .collect()
    };
    let expected = listed(&[(1, &a), (2, &b), (3, &c)]);
    let short_b = pseudo_random(4_000, 12);
    for (why, held) in [
        ("part 2 left out", vec![(1, &a[..]), (3, &c[..])]),
        (
            "part 2 shorter",
            vec![(1, &a[..]), (2, &short_b[..]), (3, &c[..])],
        ),
    ] {
        let body = seal_multipart(&kr, "b", "k", Cipher::Aes256Gcm, &held, true);
        let mut out = kura_keys::Output::new();
        let mut told =
            BodyOpener::new(kr.clone(), "b".into(), "k".into()).expect_parts(expected.clone());
        let err = told.update(&body, &mut out).unwrap_err();
        assert_eq!(err.class(), "tampered-segment", "{why}");
        assert_eq!(&out[..], &a[..], "{why}: only part 1 went out");
        // Not told: the walk emits the later part and fails only at the trailer.
        let mut out = kura_keys::Output::new();
        let mut walk = BodyOpener::new(kr.clone(), "b".into(), "k".into());
        walk.update(&body, &mut out).unwrap();
        assert!(out.len() > a.len(), "{why}");
    }
    let whole = [a.clone(), b.clone(), c.clone()].concat();
    let body = seal_multipart(
        &kr,
        "b",
        "k",
        Cipher::Aes256Gcm,
        &[(1, &a), (2, &b), (3, &c)],
        true,
    );
    let opened = BodyOpener::new(kr, "b".into(), "k".into())
        .expect_parts(expected)
        .run(&body)
        .unwrap();
    assert_eq!(opened, whole);
}
