//! `rerunctl stats`: counts by scope and status; the oldest in-progress and unknown records.
//!
//! One pass over the store with [`ScanFilter::without_results`], so that no result body is
//! read however many completed records there are, with a progress line on a terminal. A
//! record a store returns twice (Redis' `SCAN` may) is counted once.
//!
//! "Oldest" goes by the records' age (time since they last changed state); where the store
//! does not know ages, the first such record found stands in, shown with an unknown age.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher as _, RandomState};

use rerun_core::store::ScanFilter;
use rerun_core::{RecordView, Status, Store};
use serde::Serialize;

use crate::cli::Context;
use crate::failure::Failure;
use crate::output::{self, RecordJson, Table};
use crate::progress::Progress;

/// Long help: what `stats` prints, and its JSON document.
pub const ABOUT: &str = "\
Count records by scope and status, and name the oldest in-progress and unknown records.
Reads no result body. \"Oldest\" goes by the records' age; where the store does not know
ages, the first such record found stands in (with \"age_ms\": null).

JSON: {\"store\", \"scope_prefix\" | null, \"total\", \"scanned\", \"unreadable\" (records that
cannot be read, not in the counts),
\"by_status\": {\"in_progress\", \"completed\", \"released\", \"unknown\"},
\"scopes\": [{\"scope\", \"in_progress\", \"completed\", \"released\", \"unknown\", \"total\"}],
\"oldest_in_progress\": {a record as in `ls`} | null, \"oldest_unknown\": {…} | null}";

/// Records asked of the store per page.
const PAGE: usize = 1000;

/// The arguments of `stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only records whose scope starts with PREFIX
    #[arg(long, value_name = "PREFIX")]
    pub scope: Option<String>,
}

/// Counts of one scope (or all), by status (JSON field names in snake_case, as every field's:
/// `in_progress`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// In progress.
    pub in_progress: u64,
    /// Completed.
    pub completed: u64,
    /// Released.
    pub released: u64,
    /// Unknown outcome.
    pub unknown: u64,
}

impl Counts {
    fn add(&mut self, status: Status) {
        match status {
            Status::InProgress => self.in_progress += 1,
            Status::Completed => self.completed += 1,
            Status::Released => self.released += 1,
            Status::Unknown => self.unknown += 1,
        }
    }
    /// All of them.
    pub fn total(&self) -> u64 {
        self.in_progress + self.completed + self.released + self.unknown
    }
}

/// What one pass over the store found.
#[derive(Debug, Default)]
pub struct Stats {
    /// Counts by scope, in scope order.
    pub scopes: BTreeMap<String, Counts>,
    /// Counts of every scope.
    pub all: Counts,
    /// Records the store returned (duplicates included).
    pub scanned: u64,
    /// Records that could not be read (duplicates included), not counted by status.
    pub unreadable: u64,
    /// The oldest in-progress record.
    pub oldest_in_progress: Option<RecordView>,
    /// The oldest record in the unknown state.
    pub oldest_unknown: Option<RecordView>,
}

/// Keeps the older of `slot` and `candidate`: a known age beats an unknown one; between
/// unknown ages, the first found stays.
fn keep_oldest(slot: &mut Option<RecordView>, candidate: &RecordView) {
    let replace = match slot {
        None => true,
        Some(current) => candidate.age > current.age,
    };
    if replace {
        *slot = Some(candidate.clone());
    }
}

/// Counts the records of `store` (whose scope starts with `prefix`).
pub fn collect<S: Store + ?Sized>(
    store: &S,
    prefix: Option<&str>,
    progress: &mut Progress,
) -> Result<Stats, rerun_core::Error> {
    let mut filter = ScanFilter::new().without_results();
    if let Some(p) = prefix {
        filter = filter.scope_prefix(p);
    }
    let mut stats = Stats::default();
    // Keys are told apart by a 64-bit hash (a listing of millions of records stays small),
    // keyed at random per run so that no one can choose two keys that collide.
    let hashing = RandomState::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.scan_filtered(&filter, cursor.as_deref(), PAGE)?;
        stats.scanned += (page.records.len() + page.unreadable.len()) as u64;
        stats.unreadable += page.unreadable.len() as u64;
        for r in page.records.iter().filter(|r| filter.matches(r)) {
            let h = hashing.hash_one(&r.key);
            if !seen.insert(h) {
                continue;
            }
            stats.all.add(r.status);
            match stats.scopes.get_mut(r.key.scope()) {
                Some(c) => c.add(r.status),
                None => {
                    let mut c = Counts::default();
                    c.add(r.status);
                    stats.scopes.insert(r.key.scope().to_owned(), c);
                }
            }
            match r.status {
                Status::InProgress => keep_oldest(&mut stats.oldest_in_progress, r),
                Status::Unknown => keep_oldest(&mut stats.oldest_unknown, r),
                Status::Completed | Status::Released => {}
            }
        }
        progress.update(|| format!("counting: {} records", stats.all.total()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(stats)
}

#[derive(Serialize)]
struct ScopeJson<'a> {
    scope: &'a str,
    #[serde(flatten)]
    counts: Counts,
    total: u64,
}

#[derive(Serialize)]
struct Document<'a> {
    store: &'a str,
    scope_prefix: Option<&'a str>,
    total: u64,
    scanned: u64,
    unreadable: u64,
    by_status: Counts,
    scopes: Vec<ScopeJson<'a>>,
    oldest_in_progress: Option<RecordJson>,
    oldest_unknown: Option<RecordJson>,
}

/// Runs `stats`.
pub fn run(ctx: &Context, args: &Args) -> Result<(), Failure> {
    let opened = crate::store::open(ctx.store.as_deref())?;
    let mut progress = Progress::new(ctx.stderr_is_terminal);
    let stats = collect(&*opened.store, args.scope.as_deref(), &mut progress)
        .map_err(|e| opened.failure("counting records", e))?;
    drop(progress);

    if ctx.json {
        return output::print_json(&Document {
            store: &opened.name,
            scope_prefix: args.scope.as_deref(),
            total: stats.all.total(),
            scanned: stats.scanned,
            unreadable: stats.unreadable,
            by_status: stats.all,
            scopes: stats
                .scopes
                .iter()
                .map(|(scope, counts)| ScopeJson {
                    scope,
                    counts: *counts,
                    total: counts.total(),
                })
                .collect(),
            oldest_in_progress: stats.oldest_in_progress.as_ref().map(RecordJson::from),
            oldest_unknown: stats.oldest_unknown.as_ref().map(RecordJson::from),
        });
    }

    let mut table = Table::new(&[
        ("SCOPE", false),
        ("IN-PROGRESS", true),
        ("COMPLETED", true),
        ("RELEASED", true),
        ("UNKNOWN", true),
        ("TOTAL", true),
    ]);
    let row = |name: String, c: &Counts| {
        vec![
            name,
            c.in_progress.to_string(),
            c.completed.to_string(),
            c.released.to_string(),
            c.unknown.to_string(),
            c.total().to_string(),
        ]
    };
    for (scope, counts) in &stats.scopes {
        table.row(row(output::scope(scope).into_owned(), counts));
    }
    table.row(row("(all scopes)".to_owned(), &stats.all));
    let mut text = format!("{}\n", output::terminal_safe(&opened.name));
    text.push_str(&table.render());
    text.push('\n');
    for (label, record) in [
        ("oldest in progress", &stats.oldest_in_progress),
        ("oldest unknown", &stats.oldest_unknown),
    ] {
        text.push_str(&format!("{label:<19} {}\n", describe(record.as_ref())));
    }
    if stats.unreadable > 0 {
        text.push_str(&format!(
            "{:<19} {} (not counted above; `rerunctl ls` names them)\n",
            "unreadable", stats.unreadable
        ));
    }
    output::print_text(&text)
}

/// One record in a line: `billing.charge evt_42, 3m old, pid 4242 on web-1 (dead)`.
fn describe(record: Option<&RecordView>) -> String {
    let Some(r) = record else {
        return "-".to_owned();
    };
    let age = r.age.map_or_else(
        || "age unknown".to_owned(),
        |a| format!("{} old", output::duration(a)),
    );
    let holder = r.holder.as_ref().map_or_else(String::new, |h| {
        format!(
            ", {} ({})",
            output::holder_short(h),
            output::liveness_word(h.liveness())
        )
    });
    format!(
        "{} {}, {age}{holder}",
        output::scope(r.key.scope()),
        output::cut(&r.key.readable_id(), 256)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rerun_core::{Call, Error, MemoryStore};
    use std::time::Duration;

    #[test]
    fn counts_by_scope_and_status() -> Result<(), Error> {
        let store = MemoryStore::new();
        for i in 0..7u32 {
            Call::new("a.one", &i).run(&store, || Ok::<_, Error>(i))?;
        }
        for i in 0..3u32 {
            let _ = Call::new("b.two", &i).run(&store, || Err::<u32, _>(Error::config("no")));
        }
        let stats = collect(&store, None, &mut Progress::new(false))?;
        assert_eq!(stats.all.total(), 10);
        assert_eq!(stats.scopes.get("a.one").map(|c| c.completed), Some(7));
        assert_eq!(stats.scopes.get("b.two").map(|c| c.released), Some(3));
        let only_a = collect(&store, Some("a."), &mut Progress::new(false))?;
        assert_eq!(only_a.all.total(), 7);
        Ok(())
    }

    #[test]
    fn a_known_age_is_older_than_an_unknown_one() {
        let store = MemoryStore::new();
        let _ = Call::new("s", "k").run(&store, || Ok::<_, Error>(1));
        let page = store.scan(None, 10).map(|p| p.records).unwrap_or_default();
        let Some(mut r) = page.into_iter().next() else {
            return;
        };
        let mut slot = None;
        r.age = None;
        keep_oldest(&mut slot, &r);
        let mut aged = r.clone();
        aged.age = Some(Duration::from_secs(5));
        keep_oldest(&mut slot, &aged);
        r.age = None;
        keep_oldest(&mut slot, &r);
        assert_eq!(slot.and_then(|s| s.age), Some(Duration::from_secs(5)));
    }
}
