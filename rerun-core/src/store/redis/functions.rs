//! rerun's transitions as one library of Redis functions (Redis 7 and later): the form the
//! store calls when the server has it, with the scripts of `scripts` as the fallback.
//!
//! A script runs the shared layout code (prelude.lua) afresh on every call: it defines every
//! local function and constant before its transition starts. A library runs its top level once,
//! when it is loaded: the shared code is built there, and each transition is a registered
//! function that runs only its own body. Measured on Redis 7.0 (`INFO commandstats`, the same
//! record and arguments): a renew 7.7 us as a script, 6.7 us as a function; a replay 1.77 us
//! and 1.66 us; an empty script 1.07 us, an empty function 0.93 us.
//!
//! - **One source**: a function's body is the transition's script body (the same `.lua` file),
//!   wrapped in `function(KEYS, ARGV) … end`, so a change to a transition changes both forms.
//! - **Names**: the library and its functions are named after a short hash of the library's
//!   code. Function names are global on a server: two builds of rerun with different scripts on
//!   one server must never call each other's code. A library that is already there (another
//!   process of this build loaded it) is loaded, not replaced.
//! - **Flags**: none, so every function may write (an inspect upgrades a record of 0.1, so no
//!   transition is `no-writes`). Functions always replicate their effects, so reading `TIME`
//!   before a write is allowed, as it is in the scripts.
//! - **Refused before it runs**: a function that may write is refused as a whole when the
//!   server is out of memory or a read-only replica, where a script is refused only at its first
//!   write (a replay, which writes nothing, still gets its answer). Such a call runs as the
//!   script, so that the store answers as it did without functions.
//! - **Gone**: a `FUNCTION FLUSH`, a failover to a replica without the library or a restart
//!   without persistence removes it. A call that finds its function missing loads the library
//!   again and is retried once, as a script call is after `NOSCRIPT`.
//! - **Chosen once**: at connect. A server without `FUNCTION` (Redis 6), or a user who may not
//!   load or call functions (`NOPERM`), gets the scripts, unchanged.

use redis::aio::MultiplexedConnection;
use redis::{Connection, RedisError, RedisResult, Script, Value};

use super::conn::Budget;
use super::scripts::{prelude, Arg, Transition};
use super::RedisStore;
use crate::store::Store as _;

/// The library of every transition, as this build loads it.
pub(super) struct Library {
    name: String,
    /// `FUNCTION LOAD`'s argument.
    source: String,
    /// The function of each transition, in [`Transition::ALL`]'s order.
    functions: Vec<String>,
    /// A function that only answers 1, called at connect to learn whether this user may call
    /// functions at all.
    probe: String,
}

impl Library {
    /// The library; `variant` (empty in production) is added to its code as a comment, which
    /// gives it another name: tests use it to load two different libraries side by side.
    pub(super) fn new(variant: &str) -> Library {
        let mut code = prelude();
        code.push('\n');
        for t in Transition::ALL {
            let (replay, body) = t.code();
            // Named apart from the shared code's locals (`load`, `parse`, …).
            code.push_str(&format!(
                "local function transition_{}(KEYS, ARGV)\n",
                t.name()
            ));
            if let Some(replay) = replay {
                code.push_str(&replay);
                code.push('\n');
            }
            code.push_str(body);
            code.push_str("\nend\n");
        }
        if !variant.is_empty() {
            code.push_str(&format!("-- {}\n", variant.replace(['\r', '\n'], " ")));
        }
        let hash = Script::new(&code).get_hash().to_owned();
        let name = format!("rerun_{}", hash.get(..12).unwrap_or(&hash));
        let functions: Vec<String> = Transition::ALL
            .iter()
            .map(|t| format!("{name}_{}", t.name()))
            .collect();
        let probe = format!("{name}_probe");
        let mut source = format!("#!lua name={name}\n{code}");
        for (t, function) in Transition::ALL.iter().zip(&functions) {
            source.push_str(&format!(
                "redis.register_function('{function}', transition_{})\n",
                t.name()
            ));
        }
        source.push_str(&format!(
            "redis.register_function{{function_name = '{probe}', callback = function() return 1 end, flags = {{'no-writes'}}}}\n"
        ));
        Library {
            name,
            source,
            functions,
            probe,
        }
    }

    /// The library's name, as `FUNCTION LIST` shows it.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The function of a transition.
    pub(super) fn function(&self, t: Transition) -> &str {
        self.functions
            .get(t as usize)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// `FUNCTION LOAD` of the library (its reply: see [`Library::loaded`]).
    pub(super) fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg(&self.source);
        cmd
    }

    /// Loads the library again on `conn`, after a call found it gone (a load that finds it
    /// there, loaded by another client meanwhile, counts as loaded).
    pub(super) fn load_sync(&self, conn: &mut Connection) -> RedisResult<()> {
        self.reloading();
        load_result(self.load_cmd().query(conn))
    }

    /// The async twin of [`Library::load_sync`].
    pub(super) async fn load_async(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        self.reloading();
        load_result(self.load_cmd().query_async(conn).await)
    }

    fn reloading(&self) {
        tracing::debug!(
            library = self.name(),
            "rerun: Redis lost rerun's functions; loading them again"
        );
    }

    /// Whether `FUNCTION LOAD`'s reply means the library is there: loaded now, or already (by
    /// another process of this build; the name is the code's hash, so it is the same code).
    pub(super) fn loaded(reply: &RedisResult<Value>) -> bool {
        match reply {
            Ok(Value::ServerError(e)) => already_exists(e.details()),
            Ok(_) => true,
            Err(e) => e.code() == Some("ERR") && already_exists(e.detail()),
        }
    }

    /// The library, if the replies of its load and of the probe (the first two of `replies`,
    /// made at connect) say this store may use it; logs the choice either way.
    pub(super) fn usable(self, store: &RedisStore, replies: &[Value]) -> Option<Library> {
        let (loaded, probe) = (replies.first(), replies.get(1));
        let usable = loaded.is_some_and(|r| Library::loaded(&Ok(r.clone())))
            && matches!(probe, Some(Value::Int(1)));
        if usable {
            tracing::debug!(store = %store.describe(), library = self.name(), "rerun: Redis has functions; calling rerun's library of them (FCALL)");
            return Some(self);
        }
        // Redis 6 (`unknown command 'FUNCTION'`), or a user without the right (`NOPERM`).
        let why = [loaded, probe]
            .into_iter()
            .flatten()
            .find_map(|r| match r {
                Value::ServerError(e) => {
                    Some(format!("{} {}", e.code(), e.details().unwrap_or_default()))
                }
                _ => None,
            })
            .unwrap_or_else(|| "an unexpected reply".to_owned());
        tracing::debug!(store = %store.describe(), reason = %why, "rerun: Redis functions are not to be had; calling rerun's scripts (EVALSHA)");
        None
    }

    /// `FCALL` of the probe.
    pub(super) fn probe_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&self.probe).arg(0);
        cmd
    }

    /// `FCALL` of a transition on one record, its buffers sized once: a command grown argument
    /// by argument reallocates its bytes four or five times (callgrind: 1,900 instructions of a
    /// repeated call's 26,600 on the client).
    pub(super) fn fcall(&self, t: Transition, record: &str, args: &[Arg<'_>]) -> redis::Cmd {
        let function = self.function(t);
        let data = "FCALL".len()
            + function.len()
            + 1
            + record.len()
            + args.iter().map(Arg::len_bound).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(4 + args.len(), data);
        cmd.arg("FCALL").arg(function).arg(1).arg(record);
        for arg in args {
            cmd.arg(arg);
        }
        cmd
    }
}

fn already_exists(detail: Option<&str>) -> bool {
    detail.is_some_and(|d| d.contains("already exists"))
}

/// Why a function call failed, where the store does something about it.
#[derive(PartialEq, Eq)]
enum Miss {
    /// The library is gone from the server: load it again, retry once.
    Gone,
    /// Refused before it ran (out of memory, read-only replica): run the script instead.
    RefusedUpFront,
}

/// What the store does about an error of a function call (or of a pipeline of them).
fn miss(e: &RedisError) -> Option<Miss> {
    let errors = e.clone().into_server_errors()?;
    let found = |want: &Miss| {
        errors.iter().any(|(_, e)| {
            let kind = match e.code() {
                "ERR" if e.details().is_some_and(is_function_not_found) => Miss::Gone,
                "OOM" | "READONLY" => Miss::RefusedUpFront,
                _ => return false,
            };
            kind == *want
        })
    };
    [Miss::Gone, Miss::RefusedUpFront]
        .into_iter()
        .find(|m| found(m))
}

/// Redis' error for an `FCALL` of a function it does not have.
fn is_function_not_found(detail: &str) -> bool {
    detail
        .get(..18)
        .is_some_and(|d| d.eq_ignore_ascii_case("function not found"))
}

/// A library load that found the library there counts as loaded.
fn load_result(reply: RedisResult<Value>) -> RedisResult<()> {
    if Library::loaded(&reply) {
        Ok(())
    } else {
        reply.map(|_| ())
    }
}

impl RedisStore {
    /// The script invocation of a transition.
    fn invocation<'a>(
        &'a self,
        t: Transition,
        record: &str,
        args: &[Arg<'_>],
    ) -> redis::ScriptInvocation<'a> {
        let mut invocation = self.inner.scripts.get(t).key(record);
        for arg in args {
            invocation.arg(arg);
        }
        invocation
    }

    /// Runs a transition on one record: its function when the store uses functions (loading
    /// the library again if it is gone, or running the script if the function was refused
    /// before it ran), else its script (`EVALSHA`, loaded again after `NOSCRIPT`). Every round
    /// trip after the first is within what `budget` has left.
    pub(super) fn run_sync(
        &self,
        conn: &mut Connection,
        budget: &mut Budget,
        t: Transition,
        record: &str,
        args: &[Arg<'_>],
    ) -> RedisResult<Value> {
        let Some(library) = &self.inner.library else {
            return self.script_sync(conn, budget, t, record, args);
        };
        let call = library.fcall(t, record, args);
        let reply = sent_or_loaded(
            conn,
            budget,
            |conn| call.query::<Value>(conn),
            |e| miss(e) == Some(Miss::Gone),
            |conn| library.load_sync(conn),
        );
        match reply {
            Err(e) if miss(&e) == Some(Miss::RefusedUpFront) => {
                budget.next_trip(conn)?;
                self.script_sync(conn, budget, t, record, args)
            }
            other => other,
        }
    }

    /// A transition's script (`EVALSHA`; loaded again after `NOSCRIPT` and called once more),
    /// every round trip after the first within what `budget` has left.
    fn script_sync(
        &self,
        conn: &mut Connection,
        budget: &mut Budget,
        t: Transition,
        record: &str,
        args: &[Arg<'_>],
    ) -> RedisResult<Value> {
        let script = self.inner.scripts.get(t);
        let mut call = redis::cmd("EVALSHA");
        call.arg(script.get_hash()).arg(1).arg(record);
        for arg in args {
            call.arg(arg);
        }
        sent_or_loaded(
            conn,
            budget,
            |conn| call.query(conn),
            |e| e.code() == Some("NOSCRIPT"),
            |conn| script.prepare_invoke().load(conn).map(drop),
        )
    }

    /// The async twin of [`RedisStore::run_sync`].
    pub(super) async fn run_async(
        &self,
        conn: &mut MultiplexedConnection,
        t: Transition,
        record: &str,
        args: &[Arg<'_>],
    ) -> RedisResult<Value> {
        let Some(library) = &self.inner.library else {
            return self.invocation(t, record, args).invoke_async(conn).await;
        };
        let call = library.fcall(t, record, args);
        let mut reply = call.query_async::<Value>(conn).await;
        if matches!(&reply, Err(e) if miss(e) == Some(Miss::Gone)) {
            reply = match library.load_async(conn).await {
                Ok(()) => call.query_async(conn).await,
                Err(e) => Err(e),
            };
        }
        match reply {
            Err(e) if miss(&e) == Some(Miss::RefusedUpFront) => {
                self.invocation(t, record, args).invoke_async(conn).await
            }
            other => other,
        }
    }

    /// The inspect transition of every record in `names`, in one round trip (a pipeline), with
    /// the same recovery as [`RedisStore::run_sync`], within what `budget` has left.
    pub(super) fn inspect_all(
        &self,
        conn: &mut Connection,
        budget: &mut Budget,
        names: &[&str],
    ) -> RedisResult<Vec<Value>> {
        let scripts = |conn: &mut Connection, budget: &mut Budget| {
            let script = self.inner.scripts.get(Transition::Inspect);
            let mut pipe = redis::pipe();
            for name in names {
                pipe.cmd("EVALSHA").arg(script.get_hash()).arg(1).arg(*name);
            }
            sent_or_loaded(
                conn,
                budget,
                |conn| pipe.query::<Vec<Value>>(conn),
                |e| has_code(e, "NOSCRIPT"),
                |conn| script.prepare_invoke().load(conn).map(drop),
            )
        };
        let Some(library) = &self.inner.library else {
            return scripts(conn, budget);
        };
        let mut pipe = redis::pipe();
        for name in names {
            pipe.add_command(library.fcall(Transition::Inspect, name, &[]));
        }
        let replies = sent_or_loaded(
            conn,
            budget,
            |conn| pipe.query::<Vec<Value>>(conn),
            |e| miss(e) == Some(Miss::Gone),
            |conn| library.load_sync(conn),
        );
        match replies {
            Err(e) if miss(&e) == Some(Miss::RefusedUpFront) => {
                budget.next_trip(conn)?;
                scripts(conn, budget)
            }
            other => other,
        }
    }
}

/// Sends a request with `send`; when its reply says that what it runs is gone from the server
/// (`gone`: a script after `NOSCRIPT`, the library after a `FUNCTION FLUSH` or a restart),
/// loads that with `load` and sends it once more. Every round trip after the first is within
/// what `budget` has left.
fn sent_or_loaded<R>(
    conn: &mut Connection,
    budget: &mut Budget,
    mut send: impl FnMut(&mut Connection) -> RedisResult<R>,
    gone: impl Fn(&RedisError) -> bool,
    load: impl FnOnce(&mut Connection) -> RedisResult<()>,
) -> RedisResult<R> {
    match send(conn) {
        Err(e) if gone(&e) => {
            budget.next_trip(conn)?;
            load(conn)?;
            budget.next_trip(conn)?;
            send(conn)
        }
        other => other,
    }
}

/// Whether any server error in `e` (one command's, or a pipeline's) has `code`.
fn has_code(e: &RedisError, code: &str) -> bool {
    e.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_named_after_its_code_and_carries_every_transition() {
        let library = Library::new("");
        assert_eq!(library.name(), Library::new("").name());
        assert_ne!(library.name(), Library::new("another").name());
        assert!(library
            .source
            .starts_with(&format!("#!lua name={}\n", library.name())));
        for t in Transition::ALL {
            let function = library.function(t);
            assert_eq!(function, format!("{}_{}", library.name(), t.name()));
            assert!(library.source.contains(&format!("'{function}'")));
            // The transition's own code, as its script has it.
            assert!(library.source.contains(t.code().1));
        }
        assert!(!library.source.contains("@FORMAT"));
        // The shared code once, at the top level.
        assert_eq!(library.source.matches("local function held(").count(), 1);
        // No writing transition is flagged: only the probe is `no-writes`.
        assert_eq!(library.source.matches("no-writes").count(), 1);
    }

    #[test]
    fn missing_functions_and_refusals_are_told_apart() {
        let server = |code: &str, detail: &str| {
            redis::make_extension_error(code.into(), Some(detail.into()))
        };
        assert!(miss(&server("ERR", "Function not found")) == Some(Miss::Gone));
        assert!(
            miss(&server(
                "OOM",
                "command not allowed when used memory > 'maxmemory'."
            )) == Some(Miss::RefusedUpFront)
        );
        assert!(
            miss(&server(
                "READONLY",
                "You can't write against a read only replica."
            )) == Some(Miss::RefusedUpFront)
        );
        assert!(miss(&server("ERR", "Error running script")).is_none());
        assert!(miss(&server("NOPERM", "this user has no permissions")).is_none());
        assert!(Library::loaded(&Err(server(
            "ERR",
            "Library 'rerun_x' already exists"
        ))));
        assert!(!Library::loaded(&Err(server(
            "ERR",
            "unknown command 'FUNCTION'"
        ))));
    }
}
