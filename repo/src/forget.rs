//! `kura forget`: which snapshots a retention policy keeps, per host and tag set, and
//! deleting the others' snapshot objects (their data goes with `prune`).

use std::collections::BTreeMap;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::lease::Lease;
use crate::repository::Repository;
use crate::snapshot::Snapshot;
use crate::storage::{FileType, Storage};

/// A snapshot time's bucket for one rule (year and hour, day, week or month).
type Bucket = fn(&time::OffsetDateTime) -> (i32, u32);
/// Snapshots by (host, sorted tags): (time, ID).
type Groups = BTreeMap<(String, Vec<String>), Vec<(time::OffsetDateTime, Id)>>;

/// How many snapshots to keep, by rule; a snapshot kept by any rule stays.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepPolicy {
    /// The newest N.
    pub last: u32,
    /// The newest in each of the last N hours that have one.
    pub hourly: u32,
    /// ... days.
    pub daily: u32,
    /// ... ISO weeks.
    pub weekly: u32,
    /// ... months.
    pub monthly: u32,
    /// ... years.
    pub yearly: u32,
}

impl KeepPolicy {
    fn is_empty(&self) -> bool {
        self.last + self.hourly + self.daily + self.weekly + self.monthly + self.yearly == 0
    }
}

/// (kept, removed) snapshot IDs. Snapshots are grouped by host and tag set; each group is
/// judged on its own, newest first.
///
/// # Errors
/// An empty policy (it would remove everything), or a snapshot time that does not parse.
pub fn select(snaps: &[(Id, Snapshot)], policy: KeepPolicy) -> Result<(Vec<Id>, Vec<Id>)> {
    if policy.is_empty() {
        return Err(RepoError::Invalid(
            "no --keep-* rule given: refusing to forget every snapshot".into(),
        ));
    }
    let mut groups: Groups = BTreeMap::new();
    for (id, s) in snaps {
        let t =
            time::OffsetDateTime::parse(&s.time, &time::format_description::well_known::Rfc3339)
                .map_err(|e| RepoError::corrupt(format!("snapshot {}", id.short()), e))?;
        let mut tags = s.tags.clone();
        tags.sort();
        groups
            .entry((s.host.clone(), tags))
            .or_default()
            .push((t, *id));
    }
    let (mut keep, mut remove) = (Vec::new(), Vec::new());
    for (_, mut group) in groups {
        group.sort_by_key(|g| std::cmp::Reverse(g.0));
        let rules: [(u32, Bucket); 5] = [
            (policy.hourly, |t| {
                (t.year(), u32::from(t.ordinal()) * 24 + u32::from(t.hour()))
            }),
            (policy.daily, |t| (t.year(), u32::from(t.ordinal()))),
            (policy.weekly, |t| {
                let (y, w, _) = t.to_iso_week_date();
                (y, u32::from(w))
            }),
            (policy.monthly, |t| {
                (t.year(), u32::from(u8::from(t.month())))
            }),
            (policy.yearly, |t| (t.year(), 0)),
        ];
        let mut left: Vec<u32> = rules.iter().map(|r| r.0).collect();
        let mut last_bucket: Vec<Option<(i32, u32)>> = vec![None; rules.len()];
        for (i, (t, id)) in group.iter().enumerate() {
            let mut kept = (i as u64) < u64::from(policy.last);
            for (r, (_, bucket)) in rules.iter().enumerate() {
                let b = bucket(t);
                if left[r] > 0 && last_bucket[r] != Some(b) {
                    last_bucket[r] = Some(b);
                    left[r] -= 1;
                    kept = true;
                }
            }
            if kept {
                keep.push(*id);
            } else {
                remove.push(*id);
            }
        }
    }
    Ok((keep, remove))
}

/// Applies `policy`: deletes the snapshot objects it does not keep. Returns (kept, removed).
///
/// # Errors
/// An empty policy (it would remove everything), a snapshot time that does not parse, and
/// storage errors.
pub async fn forget<S: Storage>(
    repo: &Repository<S>,
    policy: KeepPolicy,
    dry_run: bool,
) -> Result<(Vec<Id>, Vec<Id>)> {
    if dry_run {
        let snaps = repo.snapshots().await?;
        return select(&snaps, policy);
    }
    let lease = Lease::acquire(&repo.storage, "forget", &repo.progress).await?;
    let result = async {
        let snaps = repo.snapshots().await?;
        let (keep, remove) = select(&snaps, policy)?;
        lease.check().await?;
        for id in &remove {
            repo.storage
                .delete(FileType::Snapshot, &id.to_hex())
                .await?;
        }
        Ok((keep, remove))
    }
    .await;
    let released = lease.release().await;
    let kept_and_removed = result?;
    released?;
    Ok(kept_and_removed)
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
            tree: Id([0; 32]),
            parent: None,
            incomplete: false,
            errors: vec![],
            summary: crate::snapshot::Summary::default(),
            program: String::new(),
        }
    }

    #[test]
    fn daily_keeps_the_newest_of_each_day_per_host() {
        let times = [
            "2026-12-01T01:00:00Z",
            "2026-12-01T23:00:00Z",
            "2026-12-02T05:00:00Z",
            "2026-12-02T06:00:00Z",
            "2026-12-03T00:30:00Z",
        ];
        let mut snaps: Vec<(Id, Snapshot)> = times
            .iter()
            .enumerate()
            .map(|(i, t)| (Id([u8::try_from(i).unwrap(); 32]), snap(t, "node-a")))
            .collect();
        snaps.push((Id([9; 32]), snap("2026-11-01T00:00:00Z", "node-b")));
        let policy = KeepPolicy {
            daily: 2,
            ..KeepPolicy::default()
        };
        let (keep, remove) = select(&snaps, policy).unwrap();
        // node-a: the 3rd (12-03) and the newest of 12-02; node-b: its only one.
        let mut keep = keep;
        keep.sort();
        assert_eq!(keep, [Id([3; 32]), Id([4; 32]), Id([9; 32])]);
        assert_eq!(remove.len(), 3);
        assert!(select(&snaps, KeepPolicy::default()).is_err());
        let (keep, _) = select(
            &snaps,
            KeepPolicy {
                last: 1,
                ..KeepPolicy::default()
            },
        )
        .unwrap();
        assert_eq!(keep.len(), 2, "one per host");
    }
}
