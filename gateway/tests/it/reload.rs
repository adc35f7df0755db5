//! Key rotation and certificate renewal without a restart (`reload.rs`): a reloaded key
//! file is used for new objects while old ones still read, a renewed certificate is served
//! to new connections, and a broken file is refused with what is in use kept.

use std::sync::Arc;

use kura_gateway::reload::{KeyLoader, KeySource};
use kura_keys::Keyring;
use kura_keys::keyfile::Existing;

use crate::harness::{AK, BUCKET, Env, SK, client, gateway_config, put};

fn loader() -> KeyLoader {
    Arc::new(|path: &std::path::Path| {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        Keyring::from_toml(&text, None).map_err(|e| e.to_string())
    })
}

/// A gateway that reloads its key file, `keys.toml` in the directory returned.
async fn reloading() -> (Env, tempfile::TempDir) {
    let mut env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.toml");
    env.keyring.save(&path, None, Existing::Refuse).unwrap();
    env.gateway.reload_on_change(
        Some(KeySource {
            path,
            load: loader(),
        }),
        false,
    );
    (env, dir)
}

/// The key ID in a stored object's header (SPEC 5.1, bytes 8 to 15).
fn stored_key_id(env: &Env, key: &str) -> String {
    let stored = std::fs::read(env.stored_path(BUCKET, key)).unwrap();
    hex::encode(&stored[8..16])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_key_file_is_used_after_a_reload_and_a_broken_one_is_refused() {
    let (env, dir) = reloading().await;
    let path = dir.path().join("keys.toml");
    env.put("before", b"sealed under the first key").await;
    let first = stored_key_id(&env, "before");
    assert_eq!(first, env.keyring.active().id.to_string());

    let mut rotated = Keyring::from_toml(&std::fs::read_to_string(&path).unwrap(), None).unwrap();
    let second = rotated.rotate("test".into()).unwrap().to_string();
    rotated.save(&path, None, Existing::Replace).unwrap();
    assert!(env.gateway.reload_now().await, "the rotated file loads");
    env.put("after", b"sealed under the second key").await;
    assert_eq!(stored_key_id(&env, "after"), second);
    assert_eq!(env.get("before").await, b"sealed under the first key");

    std::fs::write(&path, "version = 1\nactive = \"not a key id\"\n").unwrap();
    assert!(!env.gateway.reload_now().await, "a broken file is refused");
    env.put("still", b"the second key stays in use").await;
    assert_eq!(stored_key_id(&env, "still"), second);
    assert_eq!(env.get("before").await, b"sealed under the first key");
    assert_eq!(env.get("after").await, b"sealed under the second key");
    let metrics = env.gateway.metrics.render();
    assert!(
        metrics.contains("kura_reloads_total{file=\"keys\",result=\"ok\"} 1")
            && metrics.contains("kura_reloads_total{file=\"keys\",result=\"failed\"} 1"),
        "{metrics}"
    );
}

/// Found by review (2026-12-08): a reload took any key file that parsed, so a file that
/// lacked keys in use (`rotate` run on a stale copy, or `generate` by mistake, then
/// applied to the Secret) made every object under the missing keys unreadable, and the
/// replaced Secret may have held their only copy. Such a file is refused now, the keys in
/// use kept; a restart loads it, on purpose.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_file_without_a_key_in_use_is_refused_and_the_keys_in_use_stay() {
    let (env, dir) = reloading().await;
    let path = dir.path().join("keys.toml");
    env.put("before", b"sealed under the first key").await;
    let first = env.keyring.active().id.to_string();

    let other = Keyring::generate("a stale or new file".into()).unwrap();
    other.save(&path, None, Existing::Replace).unwrap();
    assert!(
        !env.gateway.reload_now().await,
        "a file without the key in use is refused"
    );
    assert_eq!(env.get("before").await, b"sealed under the first key");
    env.put("after", b"still the first key").await;
    assert_eq!(stored_key_id(&env, "after"), first);
    let metrics = env.gateway.metrics.render();
    assert!(
        metrics.contains("kura_reloads_total{file=\"keys\",result=\"failed\"} 1"),
        "{metrics}"
    );
}

/// A renewed certificate (another CA's here, so that a client can tell the two apart) is
/// served to new connections after a reload; a broken one is refused and the renewed one
/// stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_certificate_is_served_after_a_reload_and_a_broken_one_is_refused() {
    use kura_gateway::config::TlsFiles;

    use crate::server::{certificates, https_client};

    let upstream = crate::harness::Upstream::s3s_fs().await;
    let (first, second, live) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (ca1, cert1, key1) = certificates(first.path());
    let (ca2, cert2, key2) = certificates(second.path());
    let (cert, key) = (live.path().join("tls.crt"), live.path().join("tls.key"));
    std::fs::copy(&cert1, &cert).unwrap();
    std::fs::copy(&key1, &key).unwrap();
    let keyring = kura_testkit::gateway::keyring();
    let mut config = crate::harness::gateway_config(&upstream, keyring);
    config.tls = Some(TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
    });
    let mut gw = kura_gateway::server::start(config).await.unwrap();
    gw.reload_on_change(None, false);
    let port = gw.addr.port();
    https_client(port, &ca1)
        .list_buckets()
        .send()
        .await
        .unwrap();
    assert!(
        https_client(port, &ca2)
            .list_buckets()
            .send()
            .await
            .is_err()
    );

    std::fs::copy(&cert2, &cert).unwrap();
    std::fs::copy(&key2, &key).unwrap();
    assert!(gw.reload_now().await, "the renewed certificate loads");
    https_client(port, &ca2)
        .list_buckets()
        .send()
        .await
        .unwrap();
    assert!(
        https_client(port, &ca1)
            .list_buckets()
            .send()
            .await
            .is_err()
    );

    std::fs::write(&cert, "not a certificate").unwrap();
    assert!(!gw.reload_now().await, "a broken certificate is refused");
    https_client(port, &ca2)
        .list_buckets()
        .send()
        .await
        .unwrap();
    let metrics = gw.metrics.render();
    assert!(
        metrics.contains("kura_reloads_total{file=\"tls\",result=\"ok\"} 1")
            && metrics.contains("kura_reloads_total{file=\"tls\",result=\"failed\"} 1"),
        "{metrics}"
    );
}

/// Before: a HEAD of an object under a key the key file lacked was remembered as
/// unreadable for 10 minutes, so after a reload that brought the key in, HEADs still
/// failed while GETs worked. What was remembered holds only for the key file it was found
/// with. (A replica already rotated writes under the new key before this gateway has it,
/// as during a rollout of the Secret.)
#[tokio::test(flavor = "multi_thread")]
async fn an_object_unreadable_under_one_key_file_is_read_again_after_a_reload() {
    let (env, dir) = reloading().await;
    let path = dir.path().join("keys.toml");
    let mut rotated = Keyring::from_toml(&std::fs::read_to_string(&path).unwrap(), None).unwrap();
    rotated.rotate("test".into()).unwrap();
    let rotated = Arc::new(rotated);
    let ahead = kura_gateway::server::start(gateway_config(&env.upstream, rotated.clone()))
        .await
        .unwrap();
    put(
        &client(ahead.addr, AK, SK),
        "x",
        b"sealed under the second key",
    )
    .await;
    let head = || env.client.head_object().bucket(BUCKET).key("x").send();
    assert!(
        head().await.is_err(),
        "its key is not in this gateway's file yet"
    );

    rotated.save(&path, None, Existing::Replace).unwrap();
    assert!(env.gateway.reload_now().await);
    head().await.unwrap();
    assert_eq!(env.get("x").await, b"sealed under the second key");
}
