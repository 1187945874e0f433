//! `rerunctl ls`: list records, one a line.
//!
//! Pages through the store with [`Store::scan_filtered`],
//! asking it for only the scopes and states wanted and without result bodies (unless
//! `--results`), and stops as soon as `--limit` records matched: `ls --limit 10` on a store of
//! a million records reads one page, and `ls --status in-progress` reads the claims, not every
//! completed record (on stores that index states). Records come in the store's order.
//!
//! `--older-than` keeps records whose age (time since they last changed state) is known and
//! at least that long; a record whose store does not know its age is never "older".

use std::collections::HashSet;
use std::hash::{BuildHasher as _, RandomState};
use std::time::Duration;

use clap::ValueEnum;
use rerun_core::store::{ScanFilter, Unreadable};
use rerun_core::{CorruptKind, RecordView, Status, Store};
use serde::Serialize;

use crate::cli::Context;
use crate::failure::{Failure, Kind};
use crate::output::{self, RecordJson, ResultJson, Table};
use crate::progress::Progress;

/// Long help: what `ls` prints, and its JSON document.
pub const ABOUT: &str = "\
List records: scope, key, status, fence, age, holder and whether it is alive.

Records come in the store's order, up to --limit (default 100; 0 for no limit); the scan stops
as soon as the limit is filled. Only the scopes and states asked for are read, and result
bodies only with --results. Keys print in the form `show` and `forget` take back.

The ALIVE column: alive, dead (provably gone), unknown (not provable from this host: another
host, boot or PID namespace), or `lease out` for a claim whose lease ran out.

JSON: {\"store\", \"records\": [{\"scope\", \"key\", \"status\", \"fence\", \"once\", \"age_ms\",
\"holder\": {\"host\", \"pid\", \"boot_id\", \"pid_ns\", \"start_time\", \"attempt\"} | null,
\"holder_alive\": \"alive\"|\"dead\"|\"unknown\"|null, \"live\", \"lease_remaining_ms\",
\"expires_in_ms\", and with --results \"result\": {\"bytes\", \"rendered\", \"cut\", \"corrupt\"} | null}],
\"count\", \"more\" (the limit stopped the listing: more may match), \"limit\", \"scanned\",
\"unreadable\": [{\"scope\", \"key\", \"problem\"}] (records that cannot be read: the listing reads past
them; `forget` removes one)}";

/// Characters of a key shown in a table before it is cut (`--json` prints every key whole).
const KEY_SHOWN: usize = 256;
/// Characters of a result shown in a table (`show` prints it whole).
const RESULT_SHOWN: usize = 60;
/// Characters of a result in JSON from `ls --results`.
const RESULT_JSON: usize = 1000;
/// Records asked of the store per page, at most.
const PAGE: usize = 500;

/// The arguments of `ls`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only records whose scope starts with PREFIX
    #[arg(long, value_name = "PREFIX")]
    pub scope: Option<String>,
    /// Only records in this state (repeat for several)
    #[arg(long, value_enum, value_name = "STATUS")]
    pub status: Vec<StatusArg>,
    /// Only records that last changed state at least this long ago (10m, 2h, 7d)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Stop after N records (0: no limit)
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
    /// Show each completed record's result, cut short (reads the result bodies)
    #[arg(long)]
    pub results: bool,
}

/// A record state, as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// Claimed, its body running (or its holder died)
    #[value(alias = "in_progress")]
    InProgress,
    /// Its result is recorded
    Completed,
    /// An at-most-once call died mid-body: its outcome awaits a decision
    Unknown,
    /// Given back after a failed attempt
    Released,
}

impl From<StatusArg> for Status {
    fn from(s: StatusArg) -> Status {
        match s {
            StatusArg::InProgress => Status::InProgress,
            StatusArg::Completed => Status::Completed,
            StatusArg::Unknown => Status::Unknown,
            StatusArg::Released => Status::Released,
        }
    }
}

/// Parses a humantime duration (`10m`, `1h 30m`, `7d`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e}; write a duration such as 90s, 10m, 2h or 7d"))
}

#[derive(Serialize)]
struct Listed {
    #[serde(flatten)]
    record: RecordJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Option<ResultJson>>,
}

#[derive(Serialize)]
struct Document<'a> {
    store: &'a str,
    records: Vec<Listed>,
    count: usize,
    more: bool,
    limit: usize,
    scanned: u64,
    unreadable: Vec<UnreadableJson>,
}

#[derive(Serialize)]
struct UnreadableJson {
    scope: String,
    key: String,
    problem: String,
}

/// What a listing found.
pub struct Listing {
    /// The records, in the store's order.
    pub records: Vec<RecordView>,
    /// The limit stopped the listing (more may match).
    pub more: bool,
    /// Records the store returned.
    pub scanned: u64,
    /// Records of the scopes asked for that could not be read, read past.
    pub unreadable: Vec<Unreadable>,
}

/// Lists records as `args` asks, without printing.
pub fn list<S: Store + ?Sized>(
    store: &S,
    args: &Args,
    progress: &mut Progress,
) -> Result<Listing, rerun_core::Error> {
    let mut filter = ScanFilter::new();
    if let Some(prefix) = &args.scope {
        filter = filter.scope_prefix(prefix.clone());
    }
    for s in &args.status {
        filter = filter.status(Status::from(*s));
    }
    if !args.results {
        filter = filter.without_results();
    }
    let page_size = match (args.limit, args.older_than) {
        (0, _) | (_, Some(_)) => PAGE,
        (limit, None) => limit.min(PAGE),
    };
    let mut listing = Listing {
        records: Vec::new(),
        more: false,
        scanned: 0,
        unreadable: Vec::new(),
    };
    // A store may return a record twice across pages (Redis' SCAN does): list it once.
    // Keys are told apart by a 64-bit hash (a listing of millions of records stays small),
    // keyed at random per run so that no one can choose two keys that collide.
    let hashing = RandomState::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut cursor: Option<String> = None;
    'pages: loop {
        let page = store.scan_filtered(&filter, cursor.as_deref(), page_size)?;
        listing.scanned += (page.records.len() + page.unreadable.len()) as u64;
        for bad in page.unreadable {
            let h = hashing.hash_one(&bad.key);
            if filter.holds_scope(bad.key.scope()) && seen.insert(h) {
                listing.unreadable.push(bad);
            }
        }
        for record in page.records {
            if !filter.matches(&record) || !older(&record, args.older_than) {
                continue;
            }
            let h = hashing.hash_one(&record.key);
            if !seen.insert(h) {
                continue;
            }
            if args.limit != 0 && listing.records.len() == args.limit {
                listing.more = true;
                break 'pages;
            }
            listing.records.push(record);
        }
        progress.update(|| {
            format!(
                "listing: {} records read, {} match",
                listing.scanned,
                listing.records.len()
            )
        });
        if args.limit != 0 && listing.records.len() == args.limit {
            listing.more = page.next.is_some();
            break;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(listing)
}

/// Whether a record is at least `min` old; a record of unknown age never is.
fn older(record: &RecordView, min: Option<Duration>) -> bool {
    min.is_none_or(|min| record.age.is_some_and(|age| age >= min))
}

/// The ALIVE column.
fn alive_cell(r: &RecordView) -> String {
    match &r.holder {
        None => "-".to_owned(),
        Some(_) if r.status == Status::InProgress && r.lease_remaining.is_none() => {
            "lease out".to_owned()
        }
        Some(h) => output::liveness_word(h.liveness()).to_owned(),
    }
}

/// Runs `ls`.
pub fn run(ctx: &Context, args: &Args) -> Result<(), Failure> {
    let opened = crate::store::open(ctx.store.as_deref())?;
    let mut progress = Progress::new(ctx.stderr_is_terminal);
    let listing = list(&*opened.store, args, &mut progress)
        .map_err(|e| opened.failure("listing records", e))?;
    drop(progress);

    if ctx.json {
        let records = listing
            .records
            .iter()
            .map(|r| Listed {
                record: RecordJson::from(r),
                result: args.results.then(|| {
                    r.result
                        .as_deref()
                        .map(|b| ResultJson::render(b, Some(RESULT_JSON)).0)
                }),
            })
            .collect();
        output::print_json(&Document {
            store: &opened.name,
            count: listing.records.len(),
            records,
            more: listing.more,
            limit: args.limit,
            scanned: listing.scanned,
            unreadable: listing
                .unreadable
                .iter()
                .map(|u| UnreadableJson {
                    scope: u.key.scope().to_owned(),
                    key: u.key.readable_id(),
                    problem: u.kind.to_string(),
                })
                .collect(),
        })?;
        return unreadable(&listing.unreadable);
    }

    let mut columns = vec![
        ("SCOPE", false),
        ("KEY", false),
        ("STATUS", false),
        ("FENCE", true),
        ("AGE", true),
        ("HOLDER", false),
        ("ALIVE", false),
    ];
    if args.results {
        columns.push(("RESULT", false));
    }
    let mut table = Table::new(&columns);
    for r in &listing.records {
        let key = r.key.readable_id();
        let mut row = vec![
            output::scope(r.key.scope()).into_owned(),
            output::cut(&key, KEY_SHOWN).into_owned(),
            output::status_word(r.status).to_owned(),
            r.fence.to_string(),
            r.age.map_or_else(|| "-".to_owned(), output::duration),
            r.holder
                .as_ref()
                .map_or_else(|| "-".to_owned(), output::holder_short),
            alive_cell(r),
        ];
        if args.results {
            row.push(match &r.result {
                Some(bytes) => ResultJson::render(bytes, Some(RESULT_SHOWN)).0.human(),
                None => "-".to_owned(),
            });
        }
        table.row(row);
    }
    if table.is_empty() {
        if listing.unreadable.is_empty() {
            output::note("no records match");
        }
        return unreadable(&listing.unreadable);
    }
    output::print_text(&table.render())?;
    if listing.more {
        output::note(&format!(
            "(the first {}; more may match: raise --limit, or --limit 0 for all)",
            args.limit
        ));
    }
    unreadable(&listing.unreadable)
}

/// The failure (exit 2, a store error) of a listing that read past records it could not read,
/// once the others are printed: one is described as `show` would; several are named, with what
/// to do.
fn unreadable(records: &[Unreadable]) -> Result<(), Failure> {
    let named = |u: &Unreadable| {
        format!(
            "{} {}",
            output::scope(u.key.scope()),
            output::cut(&u.key.readable_id(), KEY_SHOWN)
        )
    };
    let failure = match records {
        [] => return Ok(()),
        [one] => Failure::corrupt(&one.key, &one.kind),
        several => {
            let mut list: Vec<String> = several.iter().take(5).map(named).collect();
            if several.len() > 5 {
                list.push(format!("and {} more", several.len() - 5));
            }
            Failure::new(
                Kind::Corrupt,
                format!(
                    "{} records cannot be read and were left untouched: {}",
                    several.len(),
                    list.join(", ")
                ),
            )
            .help(format!(
                "{} A record written by a newer rerun is fine: read it with that release's rerunctl, do not forget it. A damaged one: once you know what its last run did, `rerunctl forget SCOPE KEY --yes` lets its next call run afresh",
                if several.iter().any(|u| matches!(u.kind, CorruptKind::ForeignKey(_))) {
                    "`rerunctl --json ls` says what is wrong with each. A key rerun did not write (kind `foreign_key`) is reached by no call and no `forget`: delete it, if it is not yours, with the store's own client."
                } else {
                    "`rerunctl show SCOPE KEY` says what is wrong with each."
                }
            ))
        }
    };
    Err(failure.after_document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rerun_core::testing::{Faulty, Op};
    use rerun_core::{Call, Error, MemoryStore};
    use std::sync::{Arc, Mutex};

    fn args(limit: usize) -> Args {
        Args {
            scope: None,
            status: Vec::new(),
            older_than: None,
            limit,
            results: false,
        }
    }

    #[test]
    fn the_limit_stops_the_scan() -> Result<(), Error> {
        let store = MemoryStore::new();
        for i in 0..50u32 {
            Call::new("s", &i).run(&store, || Ok::<_, Error>(i))?;
        }
        let got = list(&store, &args(5), &mut Progress::new(false))?;
        assert_eq!((got.records.len(), got.more), (5, true));
        let all = list(&store, &args(0), &mut Progress::new(false))?;
        assert_eq!((all.records.len(), all.more), (50, false));
        assert!(all.records.iter().all(|r| r.result.is_none()));
        Ok(())
    }

    /// A store that records the filters it is asked to scan with, and refuses `scan`.
    fn recording(filters: Arc<Mutex<Vec<ScanFilter>>>) -> Faulty {
        Faulty::new(MemoryStore::new()).before(move |op| match op {
            Op::Scan { filter: None, .. } => {
                Err(Error::config("ls must scan through scan_filtered"))
            }
            Op::Scan {
                filter: Some(filter),
                ..
            } => {
                if let Ok(mut f) = filters.lock() {
                    f.push((*filter).clone());
                }
                Ok(())
            }
            _ => Ok(()),
        })
    }

    #[test]
    fn in_progress_listings_ask_the_store_for_claims_only() -> Result<(), Error> {
        let filters = Arc::new(Mutex::new(Vec::new()));
        let store = recording(filters.clone());
        Call::new("billing.charge", "evt_1").run(&store, || Ok::<_, Error>(1))?;
        let mut a = args(10);
        a.status = vec![StatusArg::InProgress];
        a.scope = Some("billing.".to_owned());
        let got = list(&store, &a, &mut Progress::new(false))?;
        assert!(got.records.is_empty());
        let filters = filters.lock().map(|f| f.clone()).unwrap_or_default();
        assert_eq!(
            filters.first(),
            Some(
                &ScanFilter::new()
                    .scope_prefix("billing.")
                    .status(Status::InProgress)
                    .without_results()
            )
        );
        Ok(())
    }

    #[test]
    fn unknown_ages_are_not_older() {
        let store = MemoryStore::new();
        let _ = Call::new("s", "k").run(&store, || Ok::<_, Error>(1));
        let mut a = args(10);
        a.older_than = Some(Duration::from_secs(1));
        let got = list(&store, &a, &mut Progress::new(false)).map(|l| l.records.len());
        assert_eq!(got.ok(), Some(0));
    }

    #[test]
    fn durations_parse_as_people_write_them() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("soon").is_err_and(|e| e.contains("10m")));
    }
}
