//! Retention rules (restic's): which snapshots of one group a [`KeepPolicy`] keeps, and
//! why. `last` and the calendar rules (hourly ... yearly) keep the newest snapshot of
//! each of the newest N buckets, walking a group newest first; `within` keeps what is
//! newer than the group's newest snapshot minus a [`Within`] span; the `within-*` rules
//! keep the newest of every bucket within that span; `tag` keeps snapshots with every tag
//! of one of its lists. `forget.rs` groups, filters and deletes.

use serde::Serialize;
use time::OffsetDateTime;

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::select::has_tags;
use crate::snapshot::Snapshot;

/// A snapshot time's bucket for one rule (year and hour, day, week or month).
type Bucket = fn(&OffsetDateTime) -> (i32, u32);

/// The calendar rules' buckets, hourly to yearly, in the snapshot's own UTC offset.
const BUCKETS: [Bucket; 5] = [
    |t| (t.year(), u32::from(t.ordinal()) * 24 + u32::from(t.hour())),
    |t| (t.year(), u32::from(t.ordinal())),
    |t| {
        let (y, w, _) = t.to_iso_week_date();
        (y, u32::from(w))
    },
    |t| (t.year(), u32::from(u8::from(t.month()))),
    |t| (t.year(), 0),
];

/// A span of calendar time as restic writes it: `1y2m3d4h` (years, months, days, hours;
/// any of them, each at most once, in that order). `m` is months here, unlike `--grace`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Within {
    /// Years.
    pub years: u32,
    /// Months.
    pub months: u32,
    /// Days.
    pub days: u32,
    /// Hours.
    pub hours: u32,
}

impl std::str::FromStr for Within {
    type Err = RepoError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            RepoError::Invalid(format!(
                "{s:?}: {why}; expected a span such as 7d, 24h, 1y6m (y years, m months, d days, h hours)"
            ))
        };
        let mut w = Self::default();
        let mut rest = s.trim();
        let mut order = 0;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let n: u32 = rest[..digits]
                .parse()
                .map_err(|_| bad("a number must come first"))?;
            let unit = rest[digits..]
                .chars()
                .next()
                .ok_or_else(|| bad("a unit must follow the number"))?;
            let (slot, rank) = match unit {
                'y' => (&mut w.years, 1),
                'm' => (&mut w.months, 2),
                'd' => (&mut w.days, 3),
                'h' => (&mut w.hours, 4),
                _ => return Err(bad("units are y, m, d and h")),
            };
            if rank <= order {
                return Err(bad("each unit once, in the order y, m, d, h"));
            }
            order = rank;
            *slot = n;
            rest = &rest[digits + 1..];
        }
        if w == Self::default() {
            return Err(bad("the span must be more than zero"));
        }
        Ok(w)
    }
}

impl std::fmt::Display for Within {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, unit) in [
            (self.years, 'y'),
            (self.months, 'm'),
            (self.days, 'd'),
            (self.hours, 'h'),
        ] {
            if n > 0 {
                write!(f, "{n}{unit}")?;
            }
        }
        Ok(())
    }
}

impl Within {
    /// `t` minus this span: calendar years and months first (a day past the end of the
    /// month it lands in becomes that month's last day), then days and hours.
    fn before(self, t: OffsetDateTime) -> OffsetDateTime {
        let month_index = i64::from(t.year()) * 12 + i64::from(u8::from(t.month()))
            - 1
            - i64::from(self.years) * 12
            - i64::from(self.months);
        let (year, month0) = (month_index.div_euclid(12), month_index.rem_euclid(12));
        let shifted = i32::try_from(year)
            .ok()
            .zip(u8::try_from(month0 + 1).ok())
            .and_then(|(y, m)| {
                let month = time::Month::try_from(m).ok()?;
                let day = t.day().min(month.length(y));
                time::Date::from_calendar_date(y, month, day).ok()
            })
            .map_or(OffsetDateTime::UNIX_EPOCH.replace_offset(t.offset()), |d| {
                t.replace_date(d)
            });
        shifted
            - time::Duration::days(i64::from(self.days))
            - time::Duration::hours(i64::from(self.hours))
    }
}

/// How many snapshots to keep, by rule; a snapshot kept by any rule stays.
#[derive(Clone, Debug, Default)]
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
    /// Every snapshot newer than the group's newest minus this.
    pub within: Option<Within>,
    /// The newest of each hour, day, week, month and year (in that order) within these
    /// spans of the group's newest.
    pub within_calendar: [Option<Within>; 5],
    /// Tag lists: a snapshot with every tag of one is kept.
    pub tags: Vec<Vec<String>>,
}

impl KeepPolicy {
    /// Refuses a policy with no rule: it would remove everything.
    pub(crate) fn check(&self) -> Result<()> {
        let empty = self.last + self.hourly + self.daily + self.weekly + self.monthly + self.yearly
            == 0
            && self.within.is_none()
            && self.within_calendar.iter().all(Option::is_none)
            && self.tags.is_empty();
        if empty {
            return Err(RepoError::Invalid(
                "no --keep-* rule given: refusing to forget every snapshot".into(),
            ));
        }
        Ok(())
    }

    fn counts(&self) -> [u32; 5] {
        [
            self.hourly,
            self.daily,
            self.weekly,
            self.monthly,
            self.yearly,
        ]
    }
}

/// Why a snapshot is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum KeepReason {
    /// `--keep-last`.
    Last,
    /// `--keep-hourly`.
    Hourly,
    /// `--keep-daily`.
    Daily,
    /// `--keep-weekly`.
    Weekly,
    /// `--keep-monthly`.
    Monthly,
    /// `--keep-yearly`.
    Yearly,
    /// `--keep-within`.
    Within,
    /// `--keep-within-hourly`.
    WithinHourly,
    /// `--keep-within-daily`.
    WithinDaily,
    /// `--keep-within-weekly`.
    WithinWeekly,
    /// `--keep-within-monthly`.
    WithinMonthly,
    /// `--keep-within-yearly`.
    WithinYearly,
    /// `--keep-tag`.
    Tag,
    /// An incomplete snapshot newer than the group's newest complete one.
    Incomplete,
}

impl std::fmt::Display for KeepReason {
    /// The rule's name as JSON gives it (`last`, `within-daily`, `tag`, ...).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Last => "last",
            Self::Hourly => "hourly",
            Self::Daily => "daily",
            Self::Weekly => "weekly",
            Self::Monthly => "monthly",
            Self::Yearly => "yearly",
            Self::Within => "within",
            Self::WithinHourly => "within-hourly",
            Self::WithinDaily => "within-daily",
            Self::WithinWeekly => "within-weekly",
            Self::WithinMonthly => "within-monthly",
            Self::WithinYearly => "within-yearly",
            Self::Tag => "tag",
            Self::Incomplete => "incomplete",
        })
    }
}

const CALENDAR: [KeepReason; 5] = [
    KeepReason::Hourly,
    KeepReason::Daily,
    KeepReason::Weekly,
    KeepReason::Monthly,
    KeepReason::Yearly,
];
const WITHIN_CALENDAR: [KeepReason; 5] = [
    KeepReason::WithinHourly,
    KeepReason::WithinDaily,
    KeepReason::WithinWeekly,
    KeepReason::WithinMonthly,
    KeepReason::WithinYearly,
];

/// Judges one group, newest first: each snapshot's reasons (none: removed).
pub(crate) fn judge(
    group: &[(OffsetDateTime, Id, &Snapshot)],
    policy: &KeepPolicy,
) -> Vec<Vec<KeepReason>> {
    let Some(newest) = group.first().map(|g| g.0) else {
        return Vec::new();
    };
    let within = policy.within.map(|w| w.before(newest));
    let within_calendar = policy.within_calendar.map(|w| w.map(|w| w.before(newest)));
    let mut left = policy.counts();
    let mut last_bucket = [None; 5];
    let mut last_within_bucket = [None; 5];
    let mut complete_seen = 0u32;
    let mut verdicts = Vec::with_capacity(group.len());
    for (t, _, snap) in group {
        let mut reasons = Vec::new();
        if snap.incomplete {
            // Newest first: no complete snapshot seen yet means none is newer.
            if complete_seen == 0 {
                reasons.push(KeepReason::Incomplete);
            }
        } else {
            if complete_seen < policy.last {
                reasons.push(KeepReason::Last);
            }
            complete_seen += 1;
            for (r, bucket) in BUCKETS.iter().enumerate() {
                let b = bucket(t);
                if left[r] > 0 && last_bucket[r] != Some(b) {
                    last_bucket[r] = Some(b);
                    left[r] -= 1;
                    reasons.push(CALENDAR[r]);
                }
                if within_calendar[r].is_some_and(|since| *t > since)
                    && last_within_bucket[r] != Some(b)
                {
                    last_within_bucket[r] = Some(b);
                    reasons.push(WITHIN_CALENDAR[r]);
                }
            }
        }
        if within.is_some_and(|since| *t > since) {
            reasons.push(KeepReason::Within);
        }
        if policy.tags.iter().any(|list| has_tags(snap, list)) {
            reasons.push(KeepReason::Tag);
        }
        verdicts.push(reasons);
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_restics_years_months_days_hours() {
        let w: Within = "1y2m3d4h".parse().unwrap();
        assert_eq!((w.years, w.months, w.days, w.hours), (1, 2, 3, 4));
        assert_eq!(w.to_string(), "1y2m3d4h");
        for bad in ["", "0d", "5", "d", "3w", "2d1y", "1d1d", "-1d"] {
            assert!(bad.parse::<Within>().is_err(), "{bad:?}");
        }
        let t = |s: &str| {
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap()
        };
        // A month back from 31 March is the last day of February.
        let m: Within = "1m".parse().unwrap();
        assert_eq!(
            m.before(t("2026-03-31T12:00:00Z")),
            t("2026-02-28T12:00:00Z")
        );
        let y: Within = "1y1d1h".parse().unwrap();
        assert_eq!(
            y.before(t("2026-01-01T00:00:00Z")),
            t("2024-12-30T23:00:00Z")
        );
    }
}
