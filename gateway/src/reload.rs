//! Reloading the key file and the TLS certificate while serving, so that a key rotation or
//! a renewed certificate reaches every replica without a restart (deploy/README.md): on
//! SIGHUP, and when a watched file's bytes change. Kubernetes updates a mounted Secret by
//! swapping a symlink two levels up, which inotify on the file misses and a look at the
//! bytes every [`RELOAD_POLL`] sees on any filesystem.
//!
//! A file that does not load is refused: the keys or certificate in use stay, the error is
//! logged and counted (`kura_reloads_total{result="failed"}`), and the file is tried again
//! when its bytes change again or on the next SIGHUP.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use kura_keys::Keyring;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;
use crate::metrics::Metrics;

/// How often the watched files' bytes are compared with those last loaded: Kubernetes
/// itself takes up to a minute to update a Secret mount.
pub const RELOAD_POLL: Duration = Duration::from_secs(10);

/// Reads a key file into a keyring; the error is a one-line message that holds no secret.
/// The binary supplies it: it knows sealed key files and where their passphrase comes from.
pub type KeyLoader = Arc<dyn Fn(&Path) -> Result<Keyring, String> + Send + Sync>;

/// The key file the gateway's keys came from, and how to read it again.
#[derive(Clone)]
pub struct KeySource {
    /// The key file.
    pub path: PathBuf,
    /// Its loader.
    pub load: KeyLoader,
}

/// What a reload replaces, and the bytes each file had when last read.
pub(crate) struct Reloader {
    pub(crate) keys: Option<(KeySource, Arc<ArcSwap<Keyring>>)>,
    pub(crate) tls: Option<(TlsFiles, Arc<ArcSwap<TlsAcceptor>>)>,
    pub(crate) metrics: Metrics,
    seen: Mutex<HashMap<PathBuf, Option<ring::digest::Digest>>>,
}

/// When `path` was last modified, in Unix seconds (0 if unknown).
fn modified(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

fn digest_of(path: &Path) -> Option<ring::digest::Digest> {
    std::fs::read(path)
        .ok()
        .map(|b| ring::digest::digest(&ring::digest::SHA256, &zeroize::Zeroizing::new(b)))
}

/// `new`, if it still holds every key of `old` (the same key under each ID: its
/// `KEY_CHECK`): a key file that lost one, reloaded, would leave every object sealed under
/// it unreadable, and the Secret it replaced may have held the only copy (`rotate` run on a
/// stale copy, `generate` by mistake). A restart loads such a file, on purpose; a reload
/// refuses it.
fn keeps_every_key(old: &Keyring, new: Keyring) -> Result<Keyring, String> {
    for entry in old.entries() {
        match new.get(entry.id) {
            Some(kept) if kept.key_check() == entry.key_check() => {}
            Some(_) => {
                return Err(format!(
                    "it holds another key under the ID {} than the one in use; restart the \
                     gateway to load it on purpose",
                    entry.id
                ));
            }
            None => {
                return Err(format!(
                    "it lacks the key {} in use, so the objects sealed under it would no \
                     longer read; restart the gateway to load it on purpose",
                    entry.id
                ));
            }
        }
    }
    Ok(new)
}

impl Reloader {
    pub(crate) fn new(
        keys: Option<(KeySource, Arc<ArcSwap<Keyring>>)>,
        tls: Option<(TlsFiles, Arc<ArcSwap<TlsAcceptor>>)>,
        metrics: Metrics,
    ) -> Self {
        let r = Self {
            keys,
            tls,
            metrics,
            seen: Mutex::new(HashMap::new()),
        };
        // What is in use now was loaded from the files as they are now.
        let mut seen = r.seen.lock().expect("not shared yet");
        for path in r.watched() {
            seen.insert(path.clone(), digest_of(&path));
        }
        drop(seen);
        if let Some((source, _)) = &r.keys {
            r.metrics.key_file_modified(modified(&source.path));
        }
        r
    }

    fn watched(&self) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        if let Some((source, _)) = &self.keys {
            paths.push(source.path.clone());
        }
        if let Some((files, _)) = &self.tls {
            paths.extend([files.cert.clone(), files.key.clone()]);
        }
        paths
    }

    /// Whether any of `paths` has bytes other than those last read, and notes them as read.
    fn take_change(&self, paths: &[&Path]) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        let mut changed = false;
        for path in paths {
            let now = digest_of(path);
            let before = seen.get(*path).and_then(Option::as_ref);
            changed |= now.as_ref().map(ring::digest::Digest::as_ref) != before.map(AsRef::as_ref);
            seen.insert(path.to_path_buf(), now);
        }
        changed
    }

    /// Reads the watched files again (with `all`, every one; else those whose bytes
    /// changed) and replaces what loaded; returns whether everything read loaded.
    pub(crate) fn reload(&self, why: &str, all: bool) -> bool {
        let mut ok = true;
        if let Some((source, keys)) = &self.keys
            && (self.take_change(&[&source.path]) || all)
        {
            let loaded = (source.load)(&source.path).and_then(|k| keeps_every_key(&keys.load(), k));
            match loaded {
                Ok(keyring) => {
                    let active = keyring.active().id;
                    keys.store(Arc::new(keyring));
                    self.metrics.reloaded("keys", true);
                    self.metrics.key_file_modified(modified(&source.path));
                    tracing::info!(%active, path = %source.path.display(), why, "key file reloaded");
                }
                Err(error) => {
                    ok = false;
                    self.metrics.reloaded("keys", false);
                    tracing::error!(
                        path = %source.path.display(),
                        why,
                        error,
                        "key file not reloaded: the keys in use stay"
                    );
                }
            }
        }
        if let Some((files, acceptor)) = &self.tls
            && (self.take_change(&[&files.cert, &files.key]) || all)
        {
            match crate::tls::acceptor(files) {
                Ok(a) => {
                    acceptor.store(Arc::new(a));
                    self.metrics.reloaded("tls", true);
                    tracing::info!(cert = %files.cert.display(), why, "TLS certificate reloaded");
                }
                Err(error) => {
                    ok = false;
                    self.metrics.reloaded("tls", false);
                    tracing::error!(
                        cert = %files.cert.display(),
                        why,
                        error,
                        "TLS certificate not reloaded: the one in use stays"
                    );
                }
            }
        }
        ok
    }
}

/// Reloads on SIGHUP (with `on_sighup`) and when a watched file changes, until `stop`.
pub(crate) async fn run(reloader: Arc<Reloader>, on_sighup: bool, mut stop: watch::Receiver<bool>) {
    let mut hangup = if on_sighup {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no SIGHUP handler: files reload when they change");
                None
            }
        }
    } else {
        None
    };
    let mut tick = tokio::time::interval(RELOAD_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            _ = stop.changed() => return,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => "SIGHUP",
            _ = tick.tick() => "changed",
        };
        let r = reloader.clone();
        // Loading runs a KDF for a sealed key file: off the request workers. A signal
        // reloads everything; a tick only what changed.
        let _ = tokio::task::spawn_blocking(move || r.reload(why, why == "SIGHUP")).await;
    }
}
