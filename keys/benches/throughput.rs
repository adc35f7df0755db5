//! Seal and open throughput at 64 KiB segments, per cipher, on one core.
//!
//! `cargo bench -p kura-keys --bench throughput`; results are recorded in `keys/README.md`.
//! `KURA_AES_BACKEND=aws-lc` or `=ring` measures one AES-256-GCM backend against the other.

#![allow(
    missing_docs,
    reason = "criterion_main! generates an undocumented main"
)]

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kura_keys::{BodyOpener, Cipher, Keyring, ObjectName, PartSealer, Transform};

const SIZE: usize = 64 << 20;
/// Input arrives in 1 MiB pieces, as from a network body.
const PIECE: usize = 1 << 20;

fn feed(t: &mut impl Transform, data: &[u8], out: &mut kura_keys::Output) {
    out.clear();
    for piece in data.chunks(PIECE) {
        t.update(piece, out).unwrap();
        // A consumer takes the output as it comes; keep the buffer from growing.
        out.clear();
    }
    t.finish(out).unwrap();
}

fn bench(c: &mut Criterion) {
    let kr = Arc::new(Keyring::generate("bench".into()).unwrap());
    let name = ObjectName::new("bench", "object").unwrap();
    let data: Vec<u8> = (0..SIZE)
        .map(|i| (i * 31 + i / 4093).to_le_bytes()[0])
        .collect();
    eprintln!(
        "AES-256-GCM on {} (this CPU's choice: {}; {} overrides it)",
        kura_keys::AesBackend::active().name(),
        kura_keys::AesBackend::for_cpu().name(),
        kura_keys::AES_BACKEND_ENV
    );
    let mut g = c.benchmark_group("64KiB-segments");
    g.throughput(Throughput::Bytes(SIZE as u64));
    g.sample_size(20);
    for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
        let sealed = PartSealer::single_part(&kr, &name, cipher)
            .unwrap()
            .run(&data)
            .unwrap();
        let mut out = kura_keys::Output::new();
        g.bench_with_input(BenchmarkId::new("seal", cipher.name()), &data, |b, data| {
            b.iter(|| {
                let mut s = PartSealer::single_part(&kr, &name, cipher).unwrap();
                feed(&mut s, data, &mut out);
            });
        });
        g.bench_with_input(
            BenchmarkId::new("open", cipher.name()),
            &sealed,
            |b, sealed| {
                b.iter(|| {
                    let mut o = BodyOpener::new(kr.clone(), "bench".into(), "object".into());
                    feed(&mut o, sealed, &mut out);
                });
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
