//! The grammar of `#[idempotent(...)]`.

use proc_macro2::Span;
use syn::parse::ParseStream;
use syn::{Expr, ExprPath, Ident, LitStr, Path};

use crate::common::{self, Arg, Errors, Kind, Known, Millis, Value};

pub const KNOWN: &[Known] = &[
    Known {
        name: "key",
        kind: Kind::Expr,
        example: "key = order.id",
    },
    Known {
        name: "scope",
        kind: Kind::Str,
        example: "scope = \"billing.charge\"",
    },
    Known {
        name: "store",
        kind: Kind::Expr,
        example: "store = &self.store",
    },
    Known {
        name: "skip",
        kind: Kind::List,
        example: "skip(db)",
    },
    Known {
        name: "ttl",
        kind: Kind::Str,
        example: "ttl = \"24h\"",
    },
    Known {
        name: "lease",
        kind: Kind::Str,
        example: "lease = \"30s\"",
    },
    Known {
        name: "wait",
        kind: Kind::Str,
        example: "wait = \"10s\"",
    },
    Known {
        name: "once",
        kind: Kind::Flag,
        example: "once",
    },
    Known {
        name: "reconcile",
        kind: Kind::Path,
        example: "reconcile = check_charge",
    },
    Known {
        name: "settle",
        kind: Kind::Str,
        example: "settle = \"5s\"",
    },
    Known {
        name: "crate",
        kind: Kind::ModPath,
        example: "crate = ::rerun_core",
    },
];

/// The arguments of one `#[idempotent(...)]`, each kept with its tokens for error spans.
#[derive(Default)]
pub struct Args {
    pub key: Option<Expr>,
    pub scope: Option<LitStr>,
    pub store: Option<Expr>,
    pub skip: Vec<Ident>,
    pub ttl: Option<(Ident, Millis)>,
    pub lease: Option<(Ident, Millis)>,
    pub wait: Option<(Ident, Millis)>,
    pub once: Option<Ident>,
    pub reconcile: Option<(Ident, ExprPath)>,
    pub settle: Option<(Ident, Millis)>,
    pub krate: Option<Path>,
}

impl Args {
    /// Parses the attribute's arguments, collecting every mistake into `errors`.
    pub fn parse(input: ParseStream, errors: &mut Errors) -> syn::Result<Args> {
        let parsed = common::parse_args(input, "#[idempotent]", KNOWN, errors)?;
        Ok(Args::from_parsed(parsed, errors))
    }

    fn from_parsed(parsed: Vec<Arg>, errors: &mut Errors) -> Args {
        let mut args = Args::default();
        let mut seen = Vec::new();
        for Arg { name, value } in parsed {
            let example = KNOWN
                .iter()
                .find(|k| name == k.name)
                .map_or("", |k| k.example);
            if !common::first_time(&mut seen, &name, example, errors) {
                continue;
            }
            let spelled = name.to_string();
            match (spelled.as_str(), value) {
                ("key", Value::Expr(e)) => args.key = Some(*e),
                ("store", Value::Expr(e)) => args.store = Some(*e),
                ("scope", Value::Str(s)) => {
                    common::check_scope(&s, errors);
                    args.scope = Some(s);
                }
                ("skip", Value::List(names)) => args.skip = names,
                ("ttl" | "lease" | "wait" | "settle", Value::Str(s)) => {
                    match common::duration(&s, &spelled) {
                        Ok(ms) => {
                            let slot = match spelled.as_str() {
                                "ttl" => &mut args.ttl,
                                "lease" => &mut args.lease,
                                "settle" => &mut args.settle,
                                _ => &mut args.wait,
                            };
                            *slot = Some((name, ms));
                        }
                        Err(e) => errors.push(e),
                    }
                }
                ("once", Value::Flag) => args.once = Some(name),
                ("reconcile", Value::Path(p)) => args.reconcile = Some((name, *p)),
                ("crate", Value::ModPath(p)) => args.krate = Some(p),
                _ => {}
            }
        }
        args
    }
}

/// Where to point errors about the attribute as a whole.
pub fn attr_span() -> Span {
    Span::call_site()
}
