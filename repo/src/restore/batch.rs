//! A directory's small files restored together, pack by pack, as restic's restorer does:
//! each file of one chunk is planned by where its blob lies, blobs that lie next to each
//! other are read with one range GET (a run of up to `FETCH_SPAN` bytes, `FETCH_AHEAD` runs
//! in flight), and a run's files are written by `WRITERS` blocking tasks. A tree of small
//! files then costs a GET per run instead of one per file. Empty files are written the same
//! way, with no GET.
//!
//! Damage stays per file: a run that cannot be read (one damaged blob fails the whole
//! GET's check) is restored again one file at a time through [`new_file`], so only the
//! files whose own blob is damaged fail. Files this plan does not cover (several chunks,
//! holes, direct I/O sizes, blobs the index does not know) go through [`new_file`] as
//! before.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::future::Either;
use futures::{Stream, StreamExt as _};

use super::direct::DIRECT_MIN;
use super::fetch::{FETCH_AHEAD, FETCH_SPAN};
use super::write::{new_file, place_file};
use crate::beneath::OpenDir;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::{Content, Node};

/// Files that are not planned by pack (see the module doc) restored at once.
pub const SMALL_FILES_AT_ONCE: usize = 16;

/// A file to restore: its node, its name in the directory, and its path relative to the
/// target (for the summary).
pub(super) type File<'a> = (&'a Node, OsString, String);

/// How one file ended: bytes written and metadata not applied, or why it failed; with its
/// path (for messages) and its path relative to the target.
pub(super) type Done = (Result<(u64, Vec<String>)>, PathBuf, String);

/// One file to write: its whole content (a blob), its node, its name and its path.
type Job = (Bytes, Node, OsString, PathBuf);

/// Blocking tasks that write a run's files.
const WRITERS: usize = 4;

/// The blob holding all of a file's content, when the file is one chunk that a run can
/// carry (not a size that goes through direct I/O).
fn one_blob(node: &Node) -> Option<Id> {
    match node.content.as_deref() {
        Some([Content::Blob { blob }]) if node.size.is_some_and(|n| n < DIRECT_MIN) => Some(*blob),
        _ => None,
    }
}

/// Restores `files` (of the open directory `dir`), yielding each file's end as it comes.
/// No further run or file is started once `stop` is set; those in flight finish (each
/// file either completes or removes itself).
pub(super) fn small_files<'a, S: Storage>(
    repo: &'a Repository<S>,
    dir: &'a OpenDir,
    files: Vec<File<'a>>,
    stop: &'a AtomicBool,
) -> impl Stream<Item = Done> + 'a {
    let mut by_blob: HashMap<Id, Vec<File<'a>>> = HashMap::new();
    let mut alone = Vec::new();
    let mut empty = Vec::new();
    for file in files {
        if is_empty(file.0) {
            empty.push(file);
            continue;
        }
        match one_blob(file.0).filter(|id| repo.index.get(id).is_some()) {
            Some(id) => by_blob.entry(id).or_default().push(file),
            None => alone.push(file),
        }
    }
    // Where each blob lies, so that neighbours in a pack become one run.
    let mut ids: Vec<Id> = by_blob.keys().copied().collect();
    ids.sort_by_key(|id| repo.index.get(id).map(|l| (l.pack, l.offset)));
    let mut runs = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let n = repo.run_of(&ids[i..], FETCH_SPAN).max(1);
        let run: Vec<(Id, Vec<File<'a>>)> = ids[i..i + n]
            .iter()
            .map(|id| (*id, by_blob.remove(id).unwrap_or_default()))
            .collect();
        runs.push(run);
        i += n;
    }
    // Empty files need no GET: written as a run of their own, first.
    let empty = (!empty.is_empty()).then(|| vec![(Bytes::new(), empty)]);
    let empty = futures::stream::iter(empty)
        .take_while(move |_| going(stop))
        .then(move |group| write_files(repo, dir, group))
        .flat_map(futures::stream::iter);
    let by_run = futures::stream::iter(runs)
        .take_while(move |_| going(stop))
        .map(move |run| one_run(repo, dir, run, stop))
        .buffer_unordered(FETCH_AHEAD)
        .flatten();
    empty
        .chain(by_run)
        .chain(one_by_one(repo, dir, alone, stop))
}

/// Whether a file has no content at all (no chunk, size 0).
fn is_empty(node: &Node) -> bool {
    matches!(node.content.as_deref(), Some([])) && node.size == Some(0)
}

fn going(stop: &AtomicBool) -> std::future::Ready<bool> {
    std::future::ready(!stop.load(Ordering::Relaxed))
}

/// Files restored each by itself ([`new_file`] reads its own content), several at once.
fn one_by_one<'a, S: Storage>(
    repo: &'a Repository<S>,
    dir: &'a OpenDir,
    files: Vec<File<'a>>,
    stop: &'a AtomicBool,
) -> impl Stream<Item = Done> + 'a {
    futures::stream::iter(files)
        .take_while(move |_| going(stop))
        .map(move |(node, name, rel)| async move {
            let path = dir.display(&name);
            let n = new_file(repo, node, dir.fd(), &name, &path).await;
            (n, path, rel)
        })
        .buffer_unordered(SMALL_FILES_AT_ONCE)
}

/// Reads one run's blobs with one GET and writes their files; when the run cannot be
/// read, its files are restored each by itself instead, as they are taken from the
/// stream (so that a restore that gives up starts none of them).
async fn one_run<'a, S: Storage>(
    repo: &'a Repository<S>,
    dir: &'a OpenDir,
    run: Vec<(Id, Vec<File<'a>>)>,
    stop: &'a AtomicBool,
) -> Either<futures::stream::Iter<std::vec::IntoIter<Done>>, impl Stream<Item = Done> + 'a> {
    let ids: Vec<Id> = run.iter().map(|(id, _)| *id).collect();
    let blobs = match repo.read_run(&ids).await {
        Ok(blobs) if blobs.len() == ids.len() => blobs,
        _ => {
            let files = run.into_iter().flat_map(|(_, files)| files).collect();
            return Either::Right(one_by_one(repo, dir, files, stop));
        }
    };
    let groups = blobs
        .into_iter()
        .zip(run)
        .map(|(data, (_, files))| (data, files))
        .collect();
    Either::Left(futures::stream::iter(write_files(repo, dir, groups).await))
}

/// Writes files whose content is read (each group: a blob and the files it is the whole
/// content of), split between `WRITERS` blocking tasks; the ends in the groups' order.
async fn write_files<S: Storage>(
    repo: &Repository<S>,
    dir: &OpenDir,
    groups: Vec<(Bytes, Vec<File<'_>>)>,
) -> Vec<Done> {
    let fd = match dir.fd.try_clone() {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            let e = RepoError::io(&dir.path, e);
            return fail_all(groups, dir, &e);
        }
    };
    let jobs: Vec<Job> = groups
        .iter()
        .flat_map(|(data, files)| {
            files.iter().map(move |(node, name, _)| {
                (
                    data.clone(),
                    (*node).clone(),
                    name.clone(),
                    dir.display(name),
                )
            })
        })
        .collect();
    let places: Vec<(PathBuf, String)> = groups
        .into_iter()
        .flat_map(|(_, files)| {
            files
                .into_iter()
                .map(|(_, name, rel)| (dir.display(&name), rel))
        })
        .collect();
    // A file costs several system calls (create, write, owner, mode, times, rename) and
    // little else: a run's files are split between a few blocking tasks.
    let per_task = jobs.len().div_ceil(WRITERS).max(1);
    let mut jobs = jobs.into_iter();
    let mut tasks = Vec::new();
    loop {
        let part: Vec<Job> = jobs.by_ref().take(per_task).collect();
        if part.is_empty() {
            break;
        }
        let fd = fd.clone();
        tasks.push(tokio::task::spawn_blocking(move || write_part(&fd, part)));
    }
    let mut ends = Vec::with_capacity(places.len());
    for (task, places) in futures::future::join_all(tasks)
        .await
        .into_iter()
        .zip(places.chunks(per_task))
    {
        match task {
            Ok(part) => {
                for (n, (path, rel)) in part.into_iter().zip(places) {
                    if let Ok((bytes, _)) = &n {
                        repo.progress.add_bytes(*bytes);
                    }
                    ends.push((n, path.clone(), rel.clone()));
                }
            }
            // The task was lost (a panic): its files are listed as failed.
            Err(e) => ends.extend(places.iter().map(|(path, rel)| {
                (
                    Err(RepoError::task("write task", &e)),
                    path.clone(),
                    rel.clone(),
                )
            })),
        }
    }
    ends
}

/// Writes each file from its blob, in order; the ends in the same order.
fn write_part(dir: &OwnedFd, jobs: Vec<Job>) -> Vec<Result<(u64, Vec<String>)>> {
    jobs.into_iter()
        .map(|(data, node, name, path)| place_file(&node, dir.as_fd(), &name, &path, &data))
        .collect()
}

/// Every file of a run failed by the same cause, before any was written.
fn fail_all(groups: Vec<(Bytes, Vec<File<'_>>)>, dir: &OpenDir, e: &RepoError) -> Vec<Done> {
    groups
        .into_iter()
        .flat_map(|(_, files)| files)
        .map(|(_, name, rel)| {
            let path = dir.display(&name);
            let e = RepoError::io(&path, std::io::Error::other(e.to_string()));
            (Err(e), path, rel)
        })
        .collect()
}
