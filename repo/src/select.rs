//! Choosing snapshots: the filters `--host`, `--path` and `--tag` (restic's meaning), and
//! grouping by host, paths and tags (`--group-by`). `forget` applies its rules per group;
//! resolving a snapshot reference (`latest`, an ID prefix) looks only at the snapshots
//! the filters match, and `latest` refuses when they span more than one group of host and
//! paths (two volumes of one node, say).

use serde::Serialize;

use crate::error::{LatestCandidate, RepoError, Result};
use crate::id::Id;
use crate::snapshot::Snapshot;

/// Which snapshots a command looks at. A snapshot must match every kind of filter given;
/// an empty kind matches every snapshot.
#[derive(Clone, Debug, Default)]
pub struct SnapshotFilter {
    /// The snapshot's host is one of these.
    pub hosts: Vec<String>,
    /// Every one of these is among the snapshot's paths (as recorded: `kura snapshots`
    /// shows them; a trailing `/` does not count).
    pub paths: Vec<String>,
    /// Tag lists: the snapshot has every tag of at least one of them (restic's `--tag
    /// a,b --tag c`: a and b, or c).
    pub tags: Vec<Vec<String>>,
}

/// `p` without trailing slashes (but `/` stays `/`).
fn trimmed(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() && !p.is_empty() {
        "/"
    } else {
        t
    }
}

/// Whether `snap` has every tag of `list`.
pub(crate) fn has_tags(snap: &Snapshot, list: &[String]) -> bool {
    list.iter().all(|t| snap.tags.contains(t))
}

impl SnapshotFilter {
    /// Whether `snap` passes every filter given.
    #[must_use]
    pub fn matches(&self, snap: &Snapshot) -> bool {
        (self.hosts.is_empty() || self.hosts.contains(&snap.host))
            && self
                .paths
                .iter()
                .all(|want| snap.paths.iter().any(|p| trimmed(p) == trimmed(want)))
            && (self.tags.is_empty() || self.tags.iter().any(|list| has_tags(snap, list)))
    }
}

/// What snapshots are grouped by; a group's rules (or its `latest`) see only its own
/// snapshots. The default is host and paths: each volume of each node apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "three independent switches, as `--group-by host,paths,tags` names them"
)]
pub struct GroupBy {
    /// By host name.
    pub host: bool,
    /// By the set of paths.
    pub paths: bool,
    /// By the set of tags.
    pub tags: bool,
}

impl Default for GroupBy {
    fn default() -> Self {
        Self {
            host: true,
            paths: true,
            tags: false,
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = RepoError;

    /// A comma list of `host`, `paths` and `tags`; the empty string makes one group.
    fn from_str(s: &str) -> Result<Self> {
        let mut g = Self {
            host: false,
            paths: false,
            tags: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" => g.host = true,
                "paths" => g.paths = true,
                "tags" => g.tags = true,
                _ => {
                    return Err(RepoError::Invalid(format!(
                        "--group-by {s:?}: {part:?} is none of host, paths, tags"
                    )));
                }
            }
        }
        Ok(g)
    }
}

/// One group's key: the fields grouped by (each sorted), the others `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct GroupKey {
    /// The host, when grouped by host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The paths, sorted, when grouped by paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// The tags, sorted, when grouped by tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

impl GroupBy {
    /// The key of `snap`'s group.
    #[must_use]
    pub fn key(&self, snap: &Snapshot) -> GroupKey {
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v
        };
        GroupKey {
            host: self.host.then(|| snap.host.clone()),
            paths: self.paths.then(|| sorted(&snap.exact_paths())),
            tags: self.tags.then(|| sorted(&snap.tags)),
        }
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(h) = &self.host {
            parts.push(format!("host {h}"));
        }
        if let Some(p) = &self.paths {
            parts.push(format!("paths [{}]", p.join(", ")));
        }
        if let Some(t) = &self.tags {
            parts.push(format!("tags [{}]", t.join(", ")));
        }
        if parts.is_empty() {
            f.write_str("all snapshots")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The snapshot named by `name` among `matching` (oldest first, as
/// `Repository::snapshots` lists them): a unique prefix of its ID, or `latest`, the newest,
/// refused with every group's newest when they belong to more than one host and paths.
/// `filtered` says whether filters narrowed `matching`, for the message when nothing is
/// found.
pub(crate) fn resolve(
    matching: Vec<(Id, Snapshot)>,
    name: &str,
    filtered: bool,
) -> Result<(Id, Snapshot)> {
    let among = if filtered {
        " among the snapshots the filters match"
    } else {
        ""
    };
    if name != "latest" {
        let mut found = matching
            .into_iter()
            .filter(|(id, _)| id.to_hex().starts_with(name));
        return match (found.next(), found.next()) {
            (Some(one), None) => Ok(one),
            (None, _) => Err(RepoError::NotFound(format!("snapshot {name}{among}"))),
            (Some(_), Some(_)) => Err(RepoError::NotFound(format!(
                "{name} names more than one snapshot"
            ))),
        };
    }
    let by = GroupBy::default();
    let mut newest: std::collections::BTreeMap<GroupKey, (Id, Snapshot)> =
        std::collections::BTreeMap::new();
    for (id, s) in matching {
        newest.insert(by.key(&s), (id, s));
    }
    if newest.len() > 1 {
        return Err(RepoError::AmbiguousLatest {
            candidates: newest
                .into_values()
                .map(|(id, s)| LatestCandidate {
                    host: s.host,
                    paths: s.paths,
                    id: id.to_hex(),
                    time: s.time,
                })
                .collect(),
        });
    }
    newest
        .into_values()
        .next()
        .ok_or_else(|| RepoError::NotFound(format!("no snapshots{among}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(host: &str, paths: &[&str], tags: &[&str]) -> Snapshot {
        Snapshot {
            time: "2026-12-01T00:00:00Z".into(),
            host: host.into(),
            tags: tags.iter().map(|t| (*t).to_string()).collect(),
            paths: paths.iter().map(|p| (*p).to_string()).collect(),
            paths_hex: None,
            tree: crate::id::Id([0; 32]),
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

    #[test]
    fn filters_take_any_host_every_path_and_any_whole_tag_list() {
        let s = snap("n1", &["/a", "/b/"], &["x", "y"]);
        let f = |hosts: &[&str], paths: &[&str], tags: &[&[&str]]| SnapshotFilter {
            hosts: hosts.iter().map(|h| (*h).to_string()).collect(),
            paths: paths.iter().map(|p| (*p).to_string()).collect(),
            tags: tags
                .iter()
                .map(|l| l.iter().map(|t| (*t).to_string()).collect())
                .collect(),
        };
        assert!(f(&[], &[], &[]).matches(&s));
        assert!(f(&["n2", "n1"], &[], &[]).matches(&s));
        assert!(!f(&["n2"], &[], &[]).matches(&s));
        assert!(f(&[], &["/a", "/b"], &[]).matches(&s));
        assert!(!f(&[], &["/a", "/c"], &[]).matches(&s));
        assert!(f(&[], &[], &[&["x", "y"]]).matches(&s));
        assert!(!f(&[], &[], &[&["x", "z"]]).matches(&s));
        assert!(f(&[], &[], &[&["x", "z"], &["y"]]).matches(&s));
        assert!(!f(&["n1"], &["/a"], &[&["z"]]).matches(&s));
    }

    #[test]
    fn group_by_parses_restics_lists_and_the_empty_string_is_one_group() {
        let g: GroupBy = "host,tags".parse().unwrap();
        assert!(g.host && g.tags && !g.paths);
        let one: GroupBy = "".parse().unwrap();
        assert_eq!(
            one.key(&snap("a", &["/x"], &[])),
            one.key(&snap("b", &["/y"], &["t"]))
        );
        assert!("host,volume".parse::<GroupBy>().is_err());
        let d = GroupBy::default();
        assert_ne!(
            d.key(&snap("a", &["/x"], &[])),
            d.key(&snap("a", &["/y"], &[]))
        );
        assert_eq!(
            d.key(&snap("a", &["/x", "/y"], &["t"])),
            d.key(&snap("a", &["/y", "/x"], &[]))
        );
    }

    #[test]
    fn latest_is_the_newest_of_one_volume_and_refused_across_two() {
        let at = |host: &str, path: &str, time: &str, n: u8| {
            let mut s = snap(host, &[path], &[]);
            s.time = time.into();
            (Id([n; 32]), s)
        };
        // Oldest first, as `Repository::snapshots` lists them.
        let all = vec![
            at("n1", "/a", "2026-12-01T00:00:00Z", 1),
            at("n1", "/b", "2026-12-02T00:00:00Z", 2),
            at("n1", "/a", "2026-12-03T00:00:00Z", 3),
        ];
        let err = resolve(all.clone(), "latest", false).unwrap_err();
        let RepoError::AmbiguousLatest { candidates } = &err else {
            panic!("{err}");
        };
        let named: Vec<(&str, &str)> = candidates
            .iter()
            .map(|c| (c.paths[0].as_str(), c.id.get(..2).unwrap()))
            .collect();
        assert_eq!(named, [("/a", "03"), ("/b", "02")], "each volume's newest");
        let only_a = all
            .iter()
            .filter(|(_, s)| s.paths == ["/a"])
            .cloned()
            .collect();
        assert_eq!(resolve(only_a, "latest", true).unwrap().0, Id([3; 32]));
        assert_eq!(resolve(all.clone(), "0202", false).unwrap().0, Id([2; 32]));
        let none = resolve(Vec::new(), "latest", true).unwrap_err();
        assert!(none.to_string().contains("filters"), "{none}");
    }
}
