//! Transient storage failures (issue 22 item 13): a gateway that goes away and comes back
//! is waited for, within a bound; a refusal is not retried.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use kura_repo::{BackupOptions, FileType, RepoError, Repository, S3Storage, Source, backup, check};

use crate::backup_restore::{damage, opts, packs, small_params};
use crate::harness::{Env, Hook, Hooked, Op, pseudo_random};

/// The gateway stops (connections refused) after the repository was opened and comes
/// back on the same port seconds later, longer than the S3 SDK's own retries last: the
/// backup waits for it and finishes, and its snapshot is whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_waits_for_a_gateway_that_went_away() {
    let env = Env::start().await;
    Repository::init(env.storage("gone"), small_params())
        .await
        .unwrap();
    let port = kura_testkit::net::free_port();
    let gateway = env.gateway_on(port).await;
    let mut loc = env.location("gone");
    loc.endpoint = format!("http://127.0.0.1:{port}");
    let mut repo = Repository::open(S3Storage::new(&loc)).await.unwrap();
    gateway.shutdown().await;

    let back = Duration::from_secs(5);
    let restarted = {
        let started = tokio::time::sleep(back);
        let env = &env;
        async move {
            started.await;
            env.gateway_on(port).await
        }
    };
    let data = pseudo_random(4 << 20, 22);
    let source = Source::Stdin {
        name: "db.dump".into(),
        reader: Box::new(std::io::Cursor::new(data.clone())),
    };
    let t0 = Instant::now();
    let (done, gateway) = tokio::join!(backup(&mut repo, source, opts()), restarted);
    let (_, snap) = done.expect("the backup waits for the gateway");
    assert!(t0.elapsed() >= back, "it did wait");
    assert_eq!(snap.summary.bytes_read, data.len() as u64);
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    gateway.shutdown().await;
}

/// A refusal (a wrong secret: HTTP 403) is not transient: it fails at once, not after the
/// retry bound.
#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_is_not_retried() {
    let env = Env::start().await;
    Repository::init(env.storage("denied"), small_params())
        .await
        .unwrap();
    let mut loc = env.location("denied");
    loc.secret_key = "not-the-secret".into();
    let t0 = Instant::now();
    let Err(err) = Repository::open(S3Storage::new(&loc)).await else {
        panic!("opened with a wrong secret");
    };
    assert!(err.to_string().contains("refused the credentials"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "not retried: {:?}",
        t0.elapsed()
    );
}

/// How long `check --read-data` takes over a repository of one 1 MiB stream whose packs
/// are then damaged (`everywhere`: in their headers too), and that it finds the damage.
async fn check_of_damaged_packs_takes(prefix: &str, everywhere: bool) -> Duration {
    let env = Env::start().await;
    let mut repo = Repository::init(env.storage(prefix), small_params())
        .await
        .unwrap();
    let source = Source::Stdin {
        name: "db.dump".into(),
        reader: Box::new(std::io::Cursor::new(pseudo_random(1 << 20, 23))),
    };
    backup(&mut repo, source, opts()).await.unwrap();
    damage(&packs(&env), everywhere);
    let t0 = Instant::now();
    let report = check(&mut repo, true).await.unwrap();
    assert!(!report.is_clean(), "the damage was found");
    t0.elapsed()
}

/// A stored object that failed authentication makes the gateway answer 500, which S3
/// clients retry; the gateway marks it as an error that repeats, and the repository stops
/// at once instead of retrying every damaged pack for minutes.
#[tokio::test(flavor = "multi_thread")]
async fn a_stored_object_that_failed_authentication_is_not_retried() {
    let took = check_of_damaged_packs_takes("forged", true).await;
    assert!(took < Duration::from_secs(5), "not retried: {took:?}");
}

/// A segment inside a pack fails authentication: the gateway has begun its answer and
/// breaks it off, as a gateway killed mid-answer would. Tried three times, not for the
/// whole retry bound.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_breaks_off_at_a_damaged_segment_is_tried_three_times_not_for_minutes() {
    let took = check_of_damaged_packs_takes("cut-off", false).await;
    assert!(
        took < Duration::from_secs(10),
        "tried a few times only: {took:?}"
    );
}

/// Fault-injecting hook: pack uploads fail for good once `after` have been stored (the
/// storage became unreachable for longer than the retry bound, say).
struct PacksThenOutage {
    stored: AtomicUsize,
    after: usize,
}

impl Hook for PacksThenOutage {
    async fn before(&self, op: Op, ft: FileType, name: &str) -> kura_repo::Result<()> {
        if op == Op::Put && ft == FileType::Pack && self.stored.fetch_add(1, SeqCst) >= self.after {
            return Err(RepoError::Storage {
                op: "PutObject",
                key: name.into(),
                detail: "the test's outage".into(),
            });
        }
        Ok(())
    }
}

/// Fewer packs than `INDEX_EVERY` are stored before the backup fails: index objects
/// written on the timer (here after every pack) list them, and the next run stores them
/// again only in part. Without the timer it would upload everything again.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_backup_leaves_what_it_stored_indexed_for_the_next_run() {
    let env = Env::start().await;
    Repository::init(env.storage("cut"), small_params())
        .await
        .unwrap();
    let data = pseudo_random(8 << 20, 24);
    let stdin = |data: &[u8]| Source::Stdin {
        name: "db.dump".into(),
        reader: Box::new(std::io::Cursor::new(data.to_vec())),
    };
    let every_pack = BackupOptions {
        index_interval: Some(Duration::ZERO),
        ..opts()
    };
    let failing = Hooked {
        inner: env.storage("cut"),
        hook: PacksThenOutage {
            stored: AtomicUsize::new(0),
            after: 3,
        },
    };
    let mut repo = Repository::open(failing).await.unwrap();
    let failed = backup(&mut repo, stdin(&data), every_pack.clone()).await;
    assert!(failed.is_err(), "the outage ends the backup");

    let mut repo = Repository::open(env.storage("cut")).await.unwrap();
    let (_, snap) = backup(&mut repo, stdin(&data), opts()).await.unwrap();
    let whole = snap.summary.bytes_read;
    assert!(
        snap.summary.bytes_added < whole,
        "the first run's packs were reused: {} of {whole} bytes stored again",
        snap.summary.bytes_added
    );
    let report = check(&mut repo, true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}
