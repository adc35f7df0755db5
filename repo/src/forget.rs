//! `kura forget`: which snapshots a retention policy (`keep.rs`) keeps, per group (host
//! and paths by default, `--group-by`), among the snapshots the filters match, and
//! deleting the others' snapshot objects (their data goes with `prune`).
//!
//! An incomplete snapshot (something could not be read) takes no slot of the counted or
//! calendar rules: it would push a complete one out. As Kopia does, one newer than the
//! group's newest complete snapshot is kept all the same (it holds the newest copy of
//! everything it did read); an older one stays only when `within` or `tag` keeps it.

use std::collections::BTreeMap;

use serde::Serialize;
use time::OffsetDateTime;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::keep::{KeepPolicy, KeepReason, judge};
use crate::lease::Lease;
use crate::repository::Repository;
use crate::select::{GroupBy, GroupKey, SnapshotFilter};
use crate::snapshot::Snapshot;
use crate::storage::{FileType, Storage};

/// One snapshot's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// The snapshot.
    pub id: Id,
    /// Its time, as recorded.
    pub time: String,
    /// Whether it is incomplete (it then took no slot of a counted or calendar rule).
    pub incomplete: bool,
    /// The rules that keep it; empty for one removed.
    pub reasons: Vec<KeepReason>,
}

/// One group's verdicts, newest first.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetGroup {
    /// What the group's snapshots share.
    pub group: GroupKey,
    /// Kept.
    pub keep: Vec<Verdict>,
    /// Removed (or, in a dry run, to be removed).
    pub remove: Vec<Verdict>,
}

/// What `forget` kept and removed, per group.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetReport {
    /// Nothing was deleted.
    pub dry_run: bool,
    /// The groups, by key.
    pub groups: Vec<ForgetGroup>,
}

impl ForgetReport {
    /// The kept snapshots' IDs.
    #[must_use]
    pub fn kept(&self) -> Vec<Id> {
        self.groups
            .iter()
            .flat_map(|g| g.keep.iter().map(|v| v.id))
            .collect()
    }

    /// The removed snapshots' IDs.
    #[must_use]
    pub fn removed(&self) -> Vec<Id> {
        self.groups
            .iter()
            .flat_map(|g| g.remove.iter().map(|v| v.id))
            .collect()
    }
}

/// What `forget` does: the rules, how snapshots are grouped, which it looks at, and
/// whether it only says what it would delete.
#[derive(Clone, Debug, Default)]
pub struct ForgetOptions {
    /// The rules.
    pub policy: KeepPolicy,
    /// Grouping (host and paths by default).
    pub group_by: GroupBy,
    /// Snapshots the filter does not match are neither kept nor removed: left alone.
    pub filter: SnapshotFilter,
    /// Delete nothing (and take no lease).
    pub dry_run: bool,
}

impl From<KeepPolicy> for ForgetOptions {
    fn from(policy: KeepPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }
}

/// What `opts` keeps and removes of `snaps`, per group.
///
/// # Errors
/// An empty policy (it would remove everything), or a snapshot time that does not parse.
pub fn select(snaps: &[(Id, Snapshot)], opts: &ForgetOptions) -> Result<ForgetReport> {
    opts.policy.check()?;
    let mut groups: BTreeMap<GroupKey, Vec<(OffsetDateTime, Id, &Snapshot)>> = BTreeMap::new();
    for (id, s) in snaps.iter().filter(|(_, s)| opts.filter.matches(s)) {
        let t = s.instant().ok_or_else(|| {
            RepoError::corrupt(format!("snapshot {}", id.short()), "time does not parse")
        })?;
        groups
            .entry(opts.group_by.key(s))
            .or_default()
            .push((t, *id, s));
    }
    let mut report = ForgetReport {
        dry_run: opts.dry_run,
        groups: Vec::with_capacity(groups.len()),
    };
    for (key, mut group) in groups {
        group.sort_by_key(|g| std::cmp::Reverse((g.0, g.1)));
        let mut out = ForgetGroup {
            group: key,
            keep: Vec::new(),
            remove: Vec::new(),
        };
        for ((_, id, snap), reasons) in group.iter().zip(judge(&group, &opts.policy)) {
            let v = Verdict {
                id: *id,
                time: snap.time.clone(),
                incomplete: snap.incomplete,
                reasons,
            };
            if v.reasons.is_empty() {
                out.remove.push(v);
            } else {
                out.keep.push(v);
            }
        }
        report.groups.push(out);
    }
    Ok(report)
}

/// Applies `opts`: deletes the snapshot objects its policy does not keep, holding the
/// upkeep lease; a dry run reads the snapshots, takes no lease and deletes nothing.
///
/// # Errors
/// An empty policy (it would remove everything), a snapshot time that does not parse,
/// the lease held elsewhere or lost, and storage errors.
pub async fn forget<S: Storage>(
    repo: &Repository<S>,
    opts: &ForgetOptions,
) -> Result<ForgetReport> {
    if opts.dry_run {
        let snaps = repo.snapshots().await?;
        return select(&snaps, opts);
    }
    opts.policy.check()?;
    let lease = Lease::acquire(&repo.storage, "forget", &repo.progress).await?;
    let result = async {
        let snaps = repo.snapshots().await?;
        let report = select(&snaps, opts)?;
        lease.check().await?;
        for id in report.removed() {
            repo.storage
                .delete(FileType::Snapshot, &id.to_hex())
                .await?;
        }
        Ok(report)
    }
    .await;
    let released = lease.release().await;
    let report = result?;
    released?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(time: &str, host: &str) -> Snapshot {
        Snapshot {
            time: time.into(),
            host: host.into(),
            tags: vec![],
            paths: vec![],
            paths_hex: None,
            tree: Id([0; 32]),
            parent: None,
            incomplete: false,
            errors: vec![],
            changed_during_backup: vec![],
            xattrs_recorded: false,
            summary: crate::snapshot::Summary::default(),
            block: None,
            program: String::new(),
        }
    }

    fn snaps(times: &[&str]) -> Vec<(Id, Snapshot)> {
        times
            .iter()
            .enumerate()
            .map(|(i, t)| (Id([u8::try_from(i).unwrap(); 32]), snap(t, "node-a")))
            .collect()
    }

    fn kept(snaps: &[(Id, Snapshot)], policy: KeepPolicy) -> Vec<u8> {
        let mut k: Vec<u8> = select(snaps, &policy.into())
            .unwrap()
            .kept()
            .iter()
            .map(|id| id.0[0])
            .collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn daily_keeps_the_newest_of_each_day_per_host() {
        let mut all = snaps(&[
            "2026-12-01T01:00:00Z",
            "2026-12-01T23:00:00Z",
            "2026-12-02T05:00:00Z",
            "2026-12-02T06:00:00Z",
            "2026-12-03T00:30:00Z",
        ]);
        all.push((Id([9; 32]), snap("2026-11-01T00:00:00Z", "node-b")));
        let daily = KeepPolicy {
            daily: 2,
            ..KeepPolicy::default()
        };
        // node-a: the 3rd (12-03) and the newest of 12-02; node-b: its only one.
        assert_eq!(kept(&all, daily), [3, 4, 9]);
        assert!(select(&all, &KeepPolicy::default().into()).is_err());
        let last = KeepPolicy {
            last: 1,
            ..KeepPolicy::default()
        };
        assert_eq!(kept(&all, last), [4, 9], "one per host");
    }

    #[test]
    fn keep_within_counts_back_from_the_groups_newest_snapshot_not_from_now() {
        // The schedule stopped in 2025: keep-within 2d still keeps its last two days.
        let all = snaps(&[
            "2025-01-20T00:00:00Z",
            "2025-03-08T00:00:00Z",
            "2025-03-09T12:00:00Z",
            "2025-03-10T00:00:00Z",
        ]);
        let within = |s: &str| KeepPolicy {
            within: Some(s.parse().unwrap()),
            ..KeepPolicy::default()
        };
        assert_eq!(kept(&all, within("2d")), [2, 3]);
        assert_eq!(kept(&all, within("1m")), [1, 2, 3]);
        assert_eq!(
            kept(&all, within("1m21d")),
            [1, 2, 3],
            "the bound itself is out"
        );
        assert_eq!(kept(&all, within("1m22d")), [0, 1, 2, 3]);
        let r = select(&all, &within("36h").into()).unwrap();
        assert_eq!(r.groups[0].keep[0].reasons, [KeepReason::Within]);
    }

    #[test]
    fn keep_within_daily_keeps_one_a_day_inside_the_span_only() {
        let all = snaps(&[
            "2026-01-01T10:00:00Z",
            "2026-01-05T10:00:00Z",
            "2026-01-05T20:00:00Z",
            "2026-01-06T08:00:00Z",
            "2026-01-06T09:00:00Z",
        ]);
        let mut p = KeepPolicy::default();
        p.within_calendar[1] = Some("3d".parse().unwrap());
        assert_eq!(kept(&all, p), [2, 4]);
    }

    #[test]
    fn an_incomplete_snapshot_takes_no_slot_and_an_older_one_stays_only_by_within_or_tag() {
        let mut all = snaps(&[
            "2026-01-01T10:00:00Z",
            "2026-01-02T10:00:00Z",
            "2026-01-03T10:00:00Z",
            "2026-01-04T10:00:00Z",
        ]);
        all[1].1.incomplete = true;
        all[3].1.incomplete = true;
        all[0].1.tags = vec!["keep".into(), "x".into()];
        let last = KeepPolicy {
            last: 2,
            daily: 1,
            ..KeepPolicy::default()
        };
        // 1 takes no slot, so `last 2` reaches 0; 3 is newer than every complete one.
        assert_eq!(kept(&all, last.clone()), [0, 2, 3]);
        let r = select(&all, &last.into()).unwrap();
        assert_eq!(r.groups[0].keep[0].reasons, [KeepReason::Incomplete]);
        let tag = KeepPolicy {
            last: 1,
            tags: vec![vec!["keep".into()]],
            ..KeepPolicy::default()
        };
        assert_eq!(kept(&all, tag), [0, 2, 3]);
        let within = KeepPolicy {
            within: Some("3d".parse().unwrap()),
            ..KeepPolicy::default()
        };
        assert_eq!(kept(&all, within), [1, 2, 3]);
        all[2].1.incomplete = true;
        all[0].1.incomplete = true;
        assert_eq!(
            kept(
                &all,
                KeepPolicy {
                    last: 1,
                    ..KeepPolicy::default()
                }
            ),
            [0, 1, 2, 3],
            "no complete snapshot: every one is the newest copy of something"
        );
    }
}
