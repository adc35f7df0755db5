//! `init` beside another `init`: of two nodes that both run "init if missing" on one
//! location, exactly one repository comes to exist, and the other is told so.

use bytes::Bytes;
use kura_repo::{FileType, RepoError, Repository, Storage};

use crate::backup_restore::small_params;
use crate::harness::Env;

/// Fault-injecting wrapper: `exists` answers "no" as a second node's look did when it ran
/// before the first node's `config` landed. Everything else goes to the real storage.
struct LookedBeforeTheOtherWrote<S>(S);

impl<S: Storage> Storage for LookedBeforeTheOtherWrote<S> {
    async fn put(&self, ft: FileType, name: &str, data: Bytes) -> kura_repo::Result<()> {
        self.0.put(ft, name, data).await
    }
    async fn create(&self, ft: FileType, name: &str, data: Bytes) -> kura_repo::Result<bool> {
        self.0.create(ft, name, data).await
    }
    async fn get(&self, ft: FileType, name: &str) -> kura_repo::Result<Bytes> {
        self.0.get(ft, name).await
    }
    async fn get_range(
        &self,
        ft: FileType,
        name: &str,
        offset: u64,
        len: u64,
    ) -> kura_repo::Result<Bytes> {
        self.0.get_range(ft, name, offset, len).await
    }
    async fn exists(&self, _: FileType, _: &str) -> kura_repo::Result<bool> {
        Ok(false)
    }
    async fn list(&self, ft: FileType) -> kura_repo::Result<Vec<(String, u64)>> {
        self.0.list(ft).await
    }
    async fn delete(&self, ft: FileType, name: &str) -> kura_repo::Result<()> {
        self.0.delete(ft, name).await
    }
    async fn modified(&self, ft: FileType, name: &str) -> kura_repo::Result<Option<i64>> {
        self.0.modified(ft, name).await
    }
}

/// Before: the second `init` passed its look and replaced `config` (another ID key), so
/// the first node's snapshots could no longer be verified.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_init_that_raced_the_first_writes_nothing_and_says_so() {
    let env = Env::start().await;
    Repository::init(env.storage("race"), small_params())
        .await
        .unwrap();
    let config = env.storage("race").get(FileType::Config, "").await.unwrap();

    let second = Repository::init(
        LookedBeforeTheOtherWrote(env.storage("race")),
        small_params(),
    )
    .await;
    assert!(
        matches!(second, Err(RepoError::AlreadyExists)),
        "the second init must lose: {:?}",
        second.err()
    );
    let after = env.storage("race").get(FileType::Config, "").await.unwrap();
    assert_eq!(after, config, "the first repository's config is untouched");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conditional_create_stores_once_and_refuses_the_second_writer() {
    let env = Env::start().await;
    let s = env.storage("create");
    s.ensure_bucket().await.unwrap();
    assert!(
        s.create(FileType::Config, "", Bytes::from_static(b"one"))
            .await
            .unwrap()
    );
    assert!(
        !s.create(FileType::Config, "", Bytes::from_static(b"two"))
            .await
            .unwrap()
    );
    assert_eq!(
        s.get(FileType::Config, "").await.unwrap(),
        Bytes::from_static(b"one")
    );
}
