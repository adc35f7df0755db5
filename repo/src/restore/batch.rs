//! The small files of a whole restore written together, pack by pack, as restic's
//! restorer does: the walk (`tree.rs`) queues every file of one chunk as it comes to it,
//! in whatever directory; each batch taken from the queue is planned by where its blobs
//! lie, blobs that lie next to each other are read with one range GET (a run of up to
//! `FETCH_SPAN` bytes, `FETCH_AHEAD` runs in flight), and a run's files are written by
//! `WRITERS` blocking tasks. A tree of small files then costs a GET per run instead of
//! one per file, and the files of one directory are written while the next directories'
//! are fetched. Empty files are written the same way, with no GET.
//!
//! A directory is written into from here and from the walk at once, so it takes its
//! metadata (its mtime changes with every file made in it) only once both are done with
//! it: [`Dir`] counts its files still queued or in flight.
//!
//! Damage stays per file: a run that cannot be read (one damaged blob fails the whole
//! GET's check) is restored again one file at a time through [`new_file`], so only the
//! files whose own blob is damaged fail. Files this plan does not cover (holes, direct
//! I/O sizes, blobs the index does not know) go through [`new_file`] too.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::future::Either;
use futures::{Stream, StreamExt as _};
use tokio::sync::mpsc;

use super::direct::DIRECT_MIN;
use super::fetch::{FETCH_AHEAD, FETCH_SPAN};
use super::unfinished::Naming;
use super::write::{NewOwner, new_file, place_file};
use crate::beneath::OpenDir;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::{Content, Node};

/// Files that are not planned by pack (see the module doc) restored at once.
pub const SMALL_FILES_AT_ONCE: usize = 16;

/// Files the walk may queue ahead of the writers: it waits when they are this far behind,
/// so memory holds this many nodes at most, not a tree's worth.
pub const FILES_QUEUED: usize = 1024;

/// At most this many files, or files of `FETCH_SPAN` bytes together, are planned as one
/// batch.
const BATCH_FILES: usize = 512;

/// Blocking tasks that write a run's files.
const WRITERS: usize = 4;

/// A directory the walk entered, shared with the files queued for it.
pub(super) struct Dir {
    pub(super) open: OpenDir,
    /// The owner of files created in it.
    new_owner: Option<NewOwner>,
    state: Mutex<DirState>,
}

#[derive(Default)]
struct DirState {
    /// Its files queued or being written.
    files: usize,
    /// Set when the walk has left it: the metadata the last file applies.
    left: Option<(Node, String)>,
}

impl Dir {
    pub(super) fn new(open: OpenDir) -> Arc<Self> {
        Arc::new(Self {
            new_owner: NewOwner::in_dir(open.fd()),
            open,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DirState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One of its files is queued.
    pub(super) fn file_queued(&self) {
        self.state().files += 1;
    }

    /// One of its files is done: its metadata to apply now, when that was the last file
    /// and the walk has left the directory.
    pub(super) fn file_done(&self) -> Option<(Node, String)> {
        let mut state = self.state();
        state.files -= 1;
        if state.files == 0 {
            state.left.take()
        } else {
            None
        }
    }

    /// The walk has left it, which `node` (its path relative to the target `rel`)
    /// describes: returns that to apply now when none of its files is left, or keeps it
    /// for the last one.
    pub(super) fn walk_left(&self, node: &Node, rel: &str) -> Option<(Node, String)> {
        let mut state = self.state();
        if state.files == 0 {
            Some((node.clone(), rel.to_owned()))
        } else {
            state.left = Some((node.clone(), rel.to_owned()));
            None
        }
    }
}

/// A file to restore: its node, its name in its directory, its path relative to the
/// target (for the summary), and the directory.
pub(super) struct File {
    pub(super) node: Node,
    pub(super) name: OsString,
    pub(super) rel: String,
    pub(super) dir: Arc<Dir>,
}

/// How one file ended: bytes written and metadata not applied, or why it failed; with its
/// path (for messages), its path relative to the target, and its directory.
pub(super) struct Done {
    pub(super) result: Result<(u64, Vec<String>)>,
    pub(super) path: PathBuf,
    pub(super) rel: String,
    pub(super) dir: Arc<Dir>,
}

impl Done {
    fn of(file: File, result: Result<(u64, Vec<String>)>) -> Self {
        Self {
            path: file.dir.open.display(&file.name),
            result,
            rel: file.rel,
            dir: file.dir,
        }
    }
}

/// Whether a file goes to the queue ([`small_files`]): of one chunk at most, and not of
/// a size that goes through direct I/O.
pub(super) fn is_small(node: &Node) -> bool {
    node.content.as_ref().is_none_or(|c| c.len() <= 1)
}

/// The blob holding all of a file's content, when the file is one chunk that a run can
/// carry (not a size that goes through direct I/O).
fn one_blob(node: &Node) -> Option<Id> {
    match node.content.as_deref() {
        Some([Content::Blob { blob }]) if node.size.is_some_and(|n| n < DIRECT_MIN) => Some(*blob),
        _ => None,
    }
}

/// Whether a file has no content at all (no chunk, size 0).
fn is_empty(node: &Node) -> bool {
    matches!(node.content.as_deref(), Some([])) && node.size == Some(0)
}

/// One piece of work planned from a batch.
enum Job {
    /// Blobs next to each other in a pack, and the files each is the whole content of.
    Run(Vec<(Id, Vec<File>)>),
    /// Empty files.
    Empty(Vec<File>),
    /// Files restored each by itself.
    Alone(Vec<File>),
}

/// Restores the files queued on `queue`, yielding each file's end as it comes, until the
/// queue is closed, named as `naming` says (under their own names where they are free
/// while the target is marked: `unfinished.rs`). No further run or file is started once `stop` is
/// set; those in flight finish (each file either completes or removes itself).
pub(super) fn small_files<'a, S: Storage>(
    repo: &'a Repository<S>,
    queue: mpsc::Receiver<File>,
    stop: &'a AtomicBool,
    naming: Naming,
) -> impl Stream<Item = Done> + 'a {
    futures::stream::unfold(queue, |mut queue| async move {
        let batch = next_batch(&mut queue).await?;
        Some((batch, queue))
    })
    .flat_map(move |batch| futures::stream::iter(plan(repo, batch)))
    .take_while(move |_| std::future::ready(!stop.load(Ordering::Relaxed)))
    .map(move |job| run_job(repo, job, stop, naming.clone()))
    .buffer_unordered(FETCH_AHEAD)
    .flatten()
}

/// The files queued now (waiting for one when none is), up to a batch's worth: the walk
/// is not waited on when the writers could be busy.
async fn next_batch(queue: &mut mpsc::Receiver<File>) -> Option<Vec<File>> {
    let first = queue.recv().await?;
    let mut bytes = first.node.size.unwrap_or(0);
    let mut batch = vec![first];
    while batch.len() < BATCH_FILES && bytes < FETCH_SPAN {
        match queue.try_recv() {
            Ok(file) => {
                bytes += file.node.size.unwrap_or(0);
                batch.push(file);
            }
            Err(_) => break,
        }
    }
    Some(batch)
}

/// A batch's files planned: empty ones first, then runs of blobs in pack order, then the
/// files that go each by itself.
fn plan<S: Storage>(repo: &Repository<S>, files: Vec<File>) -> Vec<Job> {
    let mut by_blob: HashMap<Id, Vec<File>> = HashMap::new();
    let mut alone = Vec::new();
    let mut empty = Vec::new();
    for file in files {
        if is_empty(&file.node) {
            empty.push(file);
            continue;
        }
        match one_blob(&file.node).filter(|id| repo.index.get(id).is_some()) {
            Some(id) => by_blob.entry(id).or_default().push(file),
            None => alone.push(file),
        }
    }
    let mut jobs = Vec::new();
    if !empty.is_empty() {
        jobs.push(Job::Empty(empty));
    }
    // Where each blob lies, so that neighbours in a pack become one run.
    let mut ids: Vec<Id> = by_blob.keys().copied().collect();
    ids.sort_by_key(|id| repo.index.get(id).map(|l| (l.pack, l.offset)));
    let mut i = 0;
    while i < ids.len() {
        let n = repo.run_of(&ids[i..], FETCH_SPAN).max(1);
        let run = ids[i..i + n]
            .iter()
            .map(|id| (*id, by_blob.remove(id).unwrap_or_default()))
            .collect();
        jobs.push(Job::Run(run));
        i += n;
    }
    if !alone.is_empty() {
        jobs.push(Job::Alone(alone));
    }
    jobs
}

/// Does one job; its files' ends as a stream.
async fn run_job<'a, S: Storage>(
    repo: &'a Repository<S>,
    job: Job,
    stop: &'a AtomicBool,
    naming: Naming,
) -> Either<futures::stream::Iter<std::vec::IntoIter<Done>>, impl Stream<Item = Done> + 'a> {
    let files = match job {
        Job::Empty(files) => {
            let ends = write_files(repo, vec![(Bytes::new(), files)], &naming).await;
            return Either::Left(futures::stream::iter(ends));
        }
        Job::Run(run) => match one_run(repo, run, &naming).await {
            Ok(ends) => return Either::Left(futures::stream::iter(ends)),
            Err(files) => files,
        },
        Job::Alone(files) => files,
    };
    Either::Right(one_by_one(repo, files, stop, naming.tag))
}

/// Files restored each by itself ([`new_file`] reads its own content), several at once,
/// as they are taken from the stream (so that a restore that gives up starts no more).
fn one_by_one<'a, S: Storage>(
    repo: &'a Repository<S>,
    files: Vec<File>,
    stop: &'a AtomicBool,
    tag: u64,
) -> impl Stream<Item = Done> + 'a {
    futures::stream::iter(files)
        .take_while(move |_| std::future::ready(!stop.load(Ordering::Relaxed)))
        .map(move |file| async move {
            let path = file.dir.open.display(&file.name);
            let n = new_file(repo, &file.node, file.dir.open.fd(), &file.name, &path, tag).await;
            Done::of(file, n)
        })
        .buffer_unordered(SMALL_FILES_AT_ONCE)
}

/// Reads one run's blobs with one GET and writes their files; when the run cannot be
/// read, returns its files, to be restored each by itself.
async fn one_run<S: Storage>(
    repo: &Repository<S>,
    run: Vec<(Id, Vec<File>)>,
    naming: &Naming,
) -> std::result::Result<Vec<Done>, Vec<File>> {
    let ids: Vec<Id> = run.iter().map(|(id, _)| *id).collect();
    let blobs = match repo.read_run(&ids).await {
        Ok(blobs) if blobs.len() == ids.len() => blobs,
        _ => return Err(run.into_iter().flat_map(|(_, files)| files).collect()),
    };
    let groups = blobs
        .into_iter()
        .zip(run)
        .map(|(data, (_, files))| (data, files))
        .collect();
    Ok(write_files(repo, groups, naming).await)
}

/// Writes files whose content is read (each group: a blob and the files it is the whole
/// content of), split between `WRITERS` blocking tasks in their order (so that one
/// directory's files mostly go to one task, not to several contending for its lock); the
/// ends in the same order.
async fn write_files<S: Storage>(
    repo: &Repository<S>,
    groups: Vec<(Bytes, Vec<File>)>,
    naming: &Naming,
) -> Vec<Done> {
    let jobs: Vec<(Bytes, File)> = groups
        .into_iter()
        .flat_map(|(data, files)| files.into_iter().map(move |file| (data.clone(), file)))
        .collect();
    // A file costs several system calls (create, write, owner, mode, times, rename) and
    // little else: a run's files are split between a few blocking tasks.
    let per_task = jobs.len().div_ceil(WRITERS).max(1);
    let mut jobs = jobs.into_iter();
    let mut tasks = Vec::new();
    loop {
        let part: Vec<(Bytes, File)> = jobs.by_ref().take(per_task).collect();
        if part.is_empty() {
            break;
        }
        // Kept to list the files as failed if the task is lost (a panic).
        let places: Vec<_> = part
            .iter()
            .map(|(_, f)| (f.dir.open.display(&f.name), f.rel.clone(), f.dir.clone()))
            .collect();
        // The task keeps its share of the marker's lock until it ends, even if this
        // restore is dropped meanwhile: it still renames files into place.
        let naming = naming.clone();
        tasks.push((
            tokio::task::spawn_blocking(move || write_part(part, &naming)),
            places,
        ));
    }
    let mut ends = Vec::new();
    for (task, places) in tasks {
        match task.await {
            Ok(part) => {
                for done in part {
                    if let Ok((bytes, _)) = &done.result {
                        repo.progress.add_bytes(*bytes);
                    }
                    ends.push(done);
                }
            }
            Err(e) => ends.extend(places.into_iter().map(|(path, rel, dir)| Done {
                result: Err(RepoError::task("write task", &e)),
                path,
                rel,
                dir,
            })),
        }
    }
    ends
}

/// Writes each file from its blob, in order; the ends in the same order.
fn write_part(jobs: Vec<(Bytes, File)>, naming: &Naming) -> Vec<Done> {
    jobs.into_iter()
        .map(|(data, file)| {
            let path = file.dir.open.display(&file.name);
            let n = place_file(
                &file.node,
                file.dir.open.fd.as_fd(),
                &file.name,
                &path,
                &data,
                (naming, file.dir.new_owner),
            );
            Done::of(file, n)
        })
        .collect()
}
