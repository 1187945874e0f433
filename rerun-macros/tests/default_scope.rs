//! The default scope (contract section 3): without `scope = "…"`, a function's records live
//! under its module path and name, and a method's under its `impl`'s self type (and trait), so
//! two types' methods of one name never share records.
//!
//! The scopes are pinned as exact strings: they come from the compiler's names for types, and a
//! compiler that formats those differently (which would orphan records) fails here.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use rerun_core::{idempotent, Error, MemoryStore, Store};

/// The scopes of every record in `store`, sorted.
fn scopes(store: &MemoryStore) -> Vec<String> {
    let page = store.scan(None, 1000).expect("memory store scans");
    let mut scopes: Vec<String> = page
        .records
        .iter()
        .map(|r| r.key.scope().to_owned())
        .collect();
    scopes.sort();
    scopes
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(f)
}

mod billing {
    use super::*;

    pub trait Handler {
        fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error>;
    }

    pub trait Notify {
        fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error>;
    }

    pub struct SendReceipt;
    pub struct UpdateLedger;

    impl Handler for SendReceipt {
        #[idempotent(key = id, store = store)]
        fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok("receipt".into())
        }
    }

    impl Handler for UpdateLedger {
        #[idempotent(key = id, store = store)]
        fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok("ledger".into())
        }
    }

    impl Notify for SendReceipt {
        #[idempotent(key = id, store = store)]
        fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok("notified".into())
        }
    }

    impl SendReceipt {
        #[idempotent(key = id, store = store)]
        pub fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok("inherent".into())
        }

        #[idempotent(key = id, store = store)]
        pub fn associated(store: &MemoryStore, id: u32) -> Result<u32, Error> {
            Ok(id)
        }

        #[idempotent(key = id, store = store)]
        pub async fn handle_async(&self, store: &MemoryStore, id: u32) -> Result<u32, Error> {
            Ok(id)
        }
    }

    #[idempotent(key = id, store = store)]
    pub fn free(store: &MemoryStore, id: u32) -> Result<u32, Error> {
        Ok(id)
    }

    #[idempotent(key = id, store = store)]
    pub async fn free_async(store: &MemoryStore, id: u32) -> Result<u32, Error> {
        Ok(id)
    }

    pub struct Queue<T>(pub T);

    impl<T: Clone + serde::Serialize> Queue<T> {
        #[idempotent(key = id, store = store)]
        pub fn push(&self, store: &MemoryStore, id: u32) -> Result<u32, Error> {
            Ok(id)
        }
    }

    pub trait AsyncHandler {
        async fn handle(&self, store: &MemoryStore, id: u32) -> Result<u32, Error>;
    }

    impl AsyncHandler for UpdateLedger {
        #[idempotent(key = id, store = store)]
        async fn handle(&self, store: &MemoryStore, id: u32) -> Result<u32, Error> {
            Ok(id)
        }
    }

    #[async_trait::async_trait]
    pub trait Boxed {
        async fn handle(&self, store: &MemoryStore, id: u32) -> Result<u32, Error>;
    }

    #[async_trait::async_trait]
    impl Boxed for SendReceipt {
        #[idempotent(key = id, store = store)]
        async fn handle(&self, store: &MemoryStore, id: u32) -> Result<u32, Error> {
            Ok(id)
        }
    }

    #[async_trait::async_trait]
    impl Boxed for UpdateLedger {
        #[idempotent(key = id, store = store)]
        async fn handle(&self, store: &MemoryStore, id: u32) -> Result<u32, Error> {
            Ok(id + 1)
        }
    }

    pub struct Hidden;

    // Impls in a block (as derive macros write them) are named `<impl … for …>` by the
    // compiler; their methods get the same scopes as anywhere else.
    const _: () = {
        impl Handler for Hidden {
            #[idempotent(key = id, store = store)]
            fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
                Ok("hidden".into())
            }
        }

        impl Hidden {
            #[idempotent(key = id, store = store)]
            pub fn inherent(&self, store: &MemoryStore, id: u32) -> Result<u32, Error> {
                Ok(id)
            }
        }

        impl<T: Clone + serde::Serialize> Handler for Queue<T> {
            #[idempotent(key = id, store = store)]
            fn handle(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
                Ok("queue".into())
            }
        }
    };
}

use billing::{AsyncHandler, Boxed, Handler, Hidden, Notify, Queue, SendReceipt, UpdateLedger};

#[test]
fn impls_in_blocks_read_as_anywhere_else() {
    let store = MemoryStore::new();
    assert_eq!(
        Handler::handle(&Hidden, &store, 1).ok().as_deref(),
        Some("hidden")
    );
    assert_eq!(Hidden.inherent(&store, 1).ok(), Some(1));
    assert_eq!(
        Handler::handle(&Queue(1u8), &store, 1).ok().as_deref(),
        Some("queue")
    );
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::billing::Hidden as default_scope::billing::Handler>::handle",
            "<default_scope::billing::Queue<_> as default_scope::billing::Handler>::handle",
            "default_scope::billing::Hidden::inherent",
        ]
    );
}

/// The bug this default fixes: the second type's method replayed the first type's result.
#[test]
fn same_named_trait_methods_of_two_types_have_their_own_records() {
    let store = MemoryStore::new();
    assert_eq!(
        Handler::handle(&SendReceipt, &store, 1).ok().as_deref(),
        Some("receipt")
    );
    assert_eq!(
        Handler::handle(&UpdateLedger, &store, 1).ok().as_deref(),
        Some("ledger")
    );
    assert_eq!(
        Handler::handle(&SendReceipt, &store, 1).ok().as_deref(),
        Some("receipt")
    );
    assert_eq!(
        Handler::handle(&UpdateLedger, &store, 1).ok().as_deref(),
        Some("ledger")
    );
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::billing::SendReceipt as default_scope::billing::Handler>::handle",
            "<default_scope::billing::UpdateLedger as default_scope::billing::Handler>::handle",
        ]
    );
}

#[test]
fn one_type_implementing_two_traits_has_two_scopes() {
    let store = MemoryStore::new();
    assert_eq!(
        Handler::handle(&SendReceipt, &store, 1).ok().as_deref(),
        Some("receipt")
    );
    assert_eq!(
        Notify::handle(&SendReceipt, &store, 1).ok().as_deref(),
        Some("notified")
    );
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::billing::SendReceipt as default_scope::billing::Handler>::handle",
            "<default_scope::billing::SendReceipt as default_scope::billing::Notify>::handle",
        ]
    );
}

#[test]
fn inherent_and_trait_methods_are_apart() {
    let store = MemoryStore::new();
    assert_eq!(
        SendReceipt.handle(&store, 1).ok().as_deref(),
        Some("inherent")
    );
    assert_eq!(
        Handler::handle(&SendReceipt, &store, 1).ok().as_deref(),
        Some("receipt")
    );
    assert_eq!(SendReceipt::associated(&store, 1).ok(), Some(1));
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::billing::SendReceipt as default_scope::billing::Handler>::handle",
            "default_scope::billing::SendReceipt::associated",
            "default_scope::billing::SendReceipt::handle",
        ]
    );
}

/// Every instantiation of a generic impl shares one scope: its parameters show as `_`.
#[test]
fn generic_impls_share_one_scope() {
    let store = MemoryStore::new();
    assert_eq!(Queue(1u8).push(&store, 1).ok(), Some(1));
    assert_eq!(Queue("x").push(&store, 1).ok(), Some(1));
    assert_eq!(scopes(&store), ["default_scope::billing::Queue<_>::push"]);
}

#[test]
fn async_functions_and_methods() {
    let store = MemoryStore::new();
    block_on(async {
        assert_eq!(billing::free_async(&store, 1).await.ok(), Some(1));
        assert_eq!(SendReceipt.handle_async(&store, 1).await.ok(), Some(1));
        assert_eq!(
            AsyncHandler::handle(&UpdateLedger, &store, 1).await.ok(),
            Some(1)
        );
    });
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::billing::UpdateLedger as default_scope::billing::AsyncHandler>::handle",
            "default_scope::billing::SendReceipt::handle_async",
            "default_scope::billing::free_async",
        ]
    );
}

#[test]
fn async_trait_methods() {
    let store = MemoryStore::new();
    block_on(async {
        assert_eq!(Boxed::handle(&SendReceipt, &store, 1).await.ok(), Some(1));
        assert_eq!(Boxed::handle(&UpdateLedger, &store, 1).await.ok(), Some(2));
        assert_eq!(Boxed::handle(&SendReceipt, &store, 1).await.ok(), Some(1));
    });
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::billing::SendReceipt as default_scope::billing::Boxed>::handle",
            "<default_scope::billing::UpdateLedger as default_scope::billing::Boxed>::handle",
        ]
    );
}

/// A free function keeps the scope it always had, `module_path!()` and its name, so records
/// written before methods got their type stay valid.
#[test]
fn free_functions_keep_module_path_and_name() {
    let store = MemoryStore::new();
    assert_eq!(billing::free(&store, 1).ok(), Some(1));
    assert_eq!(scopes(&store), [concat!(module_path!(), "::billing::free")]);
}

static NESTED_RUNS: AtomicU32 = AtomicU32::new(0);

/// The default scope is computed once per function and is the same on every call.
#[test]
fn the_scope_is_stable_across_calls() {
    #[idempotent(key = id, store = store)]
    fn counted(store: &MemoryStore, id: u32) -> Result<u32, Error> {
        Ok(NESTED_RUNS.fetch_add(1, SeqCst))
    }
    let store = MemoryStore::new();
    let first = counted(&store, 1);
    assert_eq!(counted(&store, 1).ok(), first.ok());
    assert_eq!(NESTED_RUNS.load(SeqCst), 1);
    // A function nested in another is named after both.
    assert_eq!(
        scopes(&store),
        ["default_scope::the_scope_is_stable_across_calls::counted"]
    );
}

mod defaults {
    use super::*;

    /// A trait whose methods have default bodies, annotated there.
    pub trait Greeter {
        fn name(&self) -> String;

        #[idempotent(key = id, store = store)]
        fn greet(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok(self.name())
        }

        #[idempotent(key = id, store = store)]
        async fn greet_async(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok(self.name())
        }
    }

    #[async_trait::async_trait]
    pub trait BoxedGreeter: Sync {
        fn name(&self) -> String;

        #[idempotent(key = id, store = store)]
        async fn greet(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok(self.name())
        }
    }

    pub struct Ann;
    pub struct Bob<T>(pub T);
    pub struct Cid;

    impl Greeter for Ann {
        fn name(&self) -> String {
            "ann".into()
        }
    }
    impl<T> Greeter for Bob<T> {
        fn name(&self) -> String {
            "bob".into()
        }
    }
    impl Greeter for Cid {
        fn name(&self) -> String {
            "cid".into()
        }
        // Overridden: the impl's own path, which is what the default body gave it too.
        #[idempotent(key = id, store = store)]
        fn greet(&self, store: &MemoryStore, id: u32) -> Result<String, Error> {
            Ok("cid's own".into())
        }
    }
    impl BoxedGreeter for Ann {
        fn name(&self) -> String {
            "ann".into()
        }
    }
    impl BoxedGreeter for Cid {
        fn name(&self) -> String {
            "cid".into()
        }
    }
}

/// A trait's default body is scoped by the type that runs it, as the method of that type's
/// impl would be: two types sharing one default body never share records (sync, `async fn`,
/// `#[async_trait]`), and a type that overrides the method keeps the same scope.
#[test]
fn default_bodies_are_scoped_by_the_implementing_type() {
    use defaults::{Ann, Bob, BoxedGreeter, Cid, Greeter};
    let store = MemoryStore::new();
    assert_eq!(Greeter::greet(&Ann, &store, 1).ok().as_deref(), Some("ann"));
    assert_eq!(
        Greeter::greet(&Bob(1u8), &store, 1).ok().as_deref(),
        Some("bob")
    );
    assert_eq!(
        Greeter::greet(&Cid, &store, 1).ok().as_deref(),
        Some("cid's own")
    );
    assert_eq!(Greeter::greet(&Ann, &store, 1).ok().as_deref(), Some("ann"));
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::defaults::Ann as default_scope::defaults::Greeter>::greet",
            "<default_scope::defaults::Bob<u8> as default_scope::defaults::Greeter>::greet",
            "<default_scope::defaults::Cid as default_scope::defaults::Greeter>::greet",
        ]
    );
    let store = MemoryStore::new();
    block_on(async {
        assert_eq!(
            Ann.greet_async(&store, 1).await.ok().as_deref(),
            Some("ann")
        );
        assert_eq!(
            Cid.greet_async(&store, 1).await.ok().as_deref(),
            Some("cid")
        );
        assert_eq!(
            BoxedGreeter::greet(&Ann, &store, 1).await.ok().as_deref(),
            Some("ann")
        );
        assert_eq!(
            BoxedGreeter::greet(&Cid, &store, 1).await.ok().as_deref(),
            Some("cid")
        );
    });
    assert_eq!(
        scopes(&store),
        [
            "<default_scope::defaults::Ann as default_scope::defaults::BoxedGreeter>::greet",
            "<default_scope::defaults::Ann as default_scope::defaults::Greeter>::greet_async",
            "<default_scope::defaults::Cid as default_scope::defaults::BoxedGreeter>::greet",
            "<default_scope::defaults::Cid as default_scope::defaults::Greeter>::greet_async",
        ]
    );
}

/// Under `#[async_trait]`, an argument written `_` is not fingerprinted, as in a native
/// `async fn`: its type need not be `Serialize`.
mod wildcard {
    use super::*;

    pub struct Ctx;

    #[async_trait::async_trait]
    pub trait Job {
        async fn run(&self, store: &MemoryStore, ctx: &Ctx, id: u32) -> Result<u32, Error>;
    }

    pub struct Nightly;

    #[async_trait::async_trait]
    impl Job for Nightly {
        #[idempotent(key = id, store = store)]
        async fn run(&self, store: &MemoryStore, _: &Ctx, id: u32) -> Result<u32, Error> {
            Ok(id)
        }
    }
}

#[test]
fn async_trait_wildcard_arguments_are_not_fingerprinted() {
    use wildcard::{Ctx, Job, Nightly};
    let store = MemoryStore::new();
    block_on(async {
        assert_eq!(Nightly.run(&store, &Ctx, 3).await.ok(), Some(3));
        assert_eq!(Nightly.run(&store, &Ctx, 3).await.ok(), Some(3));
    });
}
