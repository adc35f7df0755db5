//! Key rotation without a restart (`reload.rs`): a reloaded key file is used for new
//! objects while old ones still read, and a broken one is refused with the keys in use kept.

use std::sync::Arc;

use kura_gateway::reload::{KeyLoader, KeySource};
use kura_keys::Keyring;
use kura_keys::keyfile::Existing;

use crate::harness::{BUCKET, Env};

fn loader() -> KeyLoader {
    Arc::new(|path: &std::path::Path| {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        Keyring::from_toml(&text, None).map_err(|e| e.to_string())
    })
}

/// The key ID in a stored object's header (SPEC 5.1, bytes 8 to 15).
fn stored_key_id(env: &Env, key: &str) -> String {
    let stored = std::fs::read(env.stored_path(BUCKET, key)).unwrap();
    hex::encode(&stored[8..16])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_key_file_is_used_after_a_reload_and_a_broken_one_is_refused() {
    let mut env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.toml");
    env.keyring.save(&path, None, Existing::Refuse).unwrap();
    env.gateway.reload_on_change(
        Some(KeySource {
            path: path.clone(),
            load: loader(),
        }),
        false,
    );
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
