//! `kura restore --include`: which entries of a snapshot a restore writes. Patterns are
//! globs over an entry's path from the snapshot root, `/`-separated: `*`, `?` and `[...]`
//! stay within one component, `**` crosses components, `{a,b}` is either. An entry is
//! restored when it or one of its directories matches; a directory that does not match
//! is entered only when some pattern could match below it.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{RepoError, Result};

/// The compiled patterns (none: everything).
#[derive(Debug)]
pub struct Include {
    set: Option<GlobSet>,
    /// Per pattern, its leading components without glob syntax: where matches can be.
    literal: Vec<Vec<String>>,
}

impl Include {
    /// Everything.
    #[must_use]
    pub fn all() -> Self {
        Self {
            set: None,
            literal: Vec::new(),
        }
    }

    /// Whether this selects everything (no patterns).
    #[must_use]
    pub fn is_all(&self) -> bool {
        self.set.is_none()
    }

    /// The entries matching any of `patterns` (surrounding `/` ignored); everything when
    /// there are none.
    ///
    /// # Errors
    /// `Invalid` for a pattern that is not a glob.
    pub fn new(patterns: &[String]) -> Result<Self> {
        if patterns.is_empty() {
            return Ok(Self::all());
        }
        let mut set = GlobSetBuilder::new();
        let mut literal = Vec::new();
        for p in patterns {
            let p = p.trim_matches('/');
            let glob = GlobBuilder::new(p)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| RepoError::Invalid(format!("--include {p:?}: {e}")))?;
            set.add(glob);
            literal.push(
                p.split('/')
                    .take_while(|c| !c.contains(['*', '?', '[', '{', '\\']))
                    .map(str::to_string)
                    .collect(),
            );
        }
        let set = set
            .build()
            .map_err(|e| RepoError::Invalid(format!("--include: {e}")))?;
        Ok(Self {
            set: Some(set),
            literal,
        })
    }

    /// Whether the entry at `rel` matches (not counting its directories).
    #[must_use]
    pub fn matches(&self, rel: &str) -> bool {
        self.set.as_ref().is_none_or(|s| s.is_match(rel))
    }

    /// Whether an entry below the directory `rel` could match: `rel` lies on some pattern's
    /// literal leading path, or below it.
    #[must_use]
    pub fn may_contain(&self, rel: &str) -> bool {
        if self.set.is_none() {
            return true;
        }
        let dir: Vec<&str> = rel.split('/').collect();
        self.literal
            .iter()
            .any(|lit| dir.iter().zip(lit).all(|(d, l)| *d == l.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc(p: &[&str]) -> Include {
        Include::new(&p.iter().map(|s| (*s).to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn no_pattern_takes_everything() {
        let i = inc(&[]);
        assert!(i.matches("any/thing") && i.may_contain("any"));
    }

    #[test]
    fn a_plain_path_takes_that_entry_and_enters_only_its_directories() {
        let i = inc(&["/data/app/"]);
        assert!(i.matches("data/app"));
        assert!(!i.matches("data/application"));
        assert!(!i.matches("data"));
        assert!(i.may_contain("data"));
        assert!(!i.may_contain("etc"));
        assert!(!i.may_contain("database"));
    }

    #[test]
    fn star_stays_in_one_component_and_double_star_crosses() {
        let i = inc(&["data/*.log"]);
        assert!(i.matches("data/a.log"));
        assert!(!i.matches("data/sub/a.log"));
        assert!(i.may_contain("data") && !i.may_contain("other"));
        let i = inc(&["**/*.yaml"]);
        assert!(i.matches("etc/app/config.yaml") && i.matches("x.yaml"));
        assert!(i.may_contain("anything/at/all"));
    }

    #[test]
    fn several_patterns_take_the_union() {
        let i = inc(&["a/b", "c/{d,e}"]);
        assert!(i.matches("a/b") && i.matches("c/e") && !i.matches("c/f"));
        assert!(i.may_contain("a") && i.may_contain("c") && !i.may_contain("b"));
    }

    #[test]
    fn a_broken_pattern_is_an_error() {
        let err = Include::new(&["data/[".to_string()]).unwrap_err();
        assert!(matches!(err, RepoError::Invalid(_)), "{err}");
    }
}
