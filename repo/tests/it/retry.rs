//! Transient storage failures (issue 22 item 13): a gateway that goes away and comes back
//! is waited for, within a bound; a refusal is not retried.

use std::time::{Duration, Instant};

use kura_repo::{Repository, S3Storage, Source, backup, check};

use crate::backup_restore::{opts, small_params};
use crate::harness::{Env, pseudo_random};

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
