//! The `#[rerun(...)]` helper attributes of `#[derive(Idempotent)]`: a borrowed model of the
//! type (container arguments, and each field's `key`/`skip`), kept apart from generation.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Attribute, Data, DeriveInput, ExprPath, Fields, Ident, LitStr, Member, Path};

use crate::common::{self, Arg, Errors, Kind, Known, Millis, Value};

const CONTAINER: &[Known] = &[
    Known {
        name: "scope",
        kind: Kind::Str,
        example: "scope = \"stripe.charge_succeeded\"",
    },
    Known {
        name: "ttl",
        kind: Kind::Str,
        example: "ttl = \"7d\"",
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
    // Field arguments, accepted here only to say where they belong.
    Known {
        name: "key",
        kind: Kind::Flag,
        example: "key",
    },
    Known {
        name: "skip",
        kind: Kind::Flag,
        example: "skip",
    },
];

const FIELD: &[Known] = &[
    Known {
        name: "key",
        kind: Kind::Flag,
        example: "key",
    },
    Known {
        name: "skip",
        kind: Kind::Flag,
        example: "skip",
    },
    // Container arguments, accepted here only to say where they belong.
    Known {
        name: "scope",
        kind: Kind::Str,
        example: "scope = \"stripe.charge_succeeded\"",
    },
    Known {
        name: "ttl",
        kind: Kind::Str,
        example: "ttl = \"7d\"",
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

#[derive(Default)]
pub struct Container {
    pub scope: Option<LitStr>,
    pub ttl: Option<Millis>,
    pub lease: Option<Millis>,
    pub wait: Option<Millis>,
    pub once: Option<Ident>,
    pub reconcile: Option<(Ident, ExprPath)>,
    pub settle: Option<(Ident, Millis)>,
    pub krate: Option<Path>,
}

pub struct Field {
    pub member: Member,
    pub key: bool,
    pub skip: bool,
    pub span: Span,
    pub ty: syn::Type,
}

pub struct Variant {
    /// `None` for a struct.
    pub ident: Option<Ident>,
    pub fields: Vec<Field>,
    pub named: bool,
    pub span: Span,
}

pub struct Model {
    pub container: Container,
    pub variants: Vec<Variant>,
    pub is_enum: bool,
}

fn rerun_attrs(attrs: &[Attribute]) -> impl Iterator<Item = &Attribute> {
    attrs.iter().filter(|a| a.path().is_ident("rerun"))
}

pub fn model(input: &DeriveInput, errors: &mut Errors) -> Model {
    let container = container(&input.attrs, errors);
    let (variants, is_enum) = match &input.data {
        Data::Struct(s) => (
            vec![variant(None, &s.fields, input.ident.span(), errors)],
            false,
        ),
        Data::Enum(e) => (
            e.variants
                .iter()
                .map(|v| {
                    for attr in rerun_attrs(&v.attrs) {
                        errors.spanned(attr, "`#[rerun(...)]` goes on the type or on a field, not on a variant; mark the variant's key field with `#[rerun(key)]`");
                    }
                    variant(Some(v.ident.clone()), &v.fields, v.ident.span(), errors)
                })
                .collect(),
            true,
        ),
        Data::Union(u) => {
            errors.spanned(
                u.union_token,
                "`#[derive(Idempotent)]` works on structs and enums, not unions; use a struct with a `#[rerun(key)]` field",
            );
            (Vec::new(), false)
        }
    };
    Model {
        container,
        variants,
        is_enum,
    }
}

fn container(attrs: &[Attribute], errors: &mut Errors) -> Container {
    let mut c = Container::default();
    let mut seen = Vec::new();
    for attr in rerun_attrs(attrs) {
        for Arg { name, value } in common::parse_attr_args(attr, "#[rerun]", CONTAINER, errors) {
            let spelled = name.to_string();
            let example = CONTAINER
                .iter()
                .find(|k| name == k.name)
                .map_or("", |k| k.example);
            if !common::first_time(&mut seen, &name, example, errors) {
                continue;
            }
            match (spelled.as_str(), value) {
                ("scope", Value::Str(s)) => {
                    common::check_scope(&s, errors);
                    c.scope = Some(s);
                }
                ("ttl" | "lease" | "wait" | "settle", Value::Str(s)) => match common::duration(&s, &spelled) {
                    Ok(ms) => match spelled.as_str() {
                        "ttl" => c.ttl = Some(ms),
                        "lease" => c.lease = Some(ms),
                        "settle" => c.settle = Some((name, ms)),
                        _ => c.wait = Some(ms),
                    },
                    Err(e) => errors.push(e),
                },
                ("once", Value::Flag) => c.once = Some(name),
                ("reconcile", Value::Path(p)) => c.reconcile = Some((name, *p)),
                ("crate", Value::ModPath(p)) => c.krate = Some(p),
                ("key" | "skip", _) => errors.spanned(
                    &name,
                    format!("`{spelled}` goes on a field, not on the type: `#[rerun({spelled})] event_id: String`"),
                ),
                _ => {}
            }
        }
    }
    if let (Some((word, _)), None) = (&c.reconcile, &c.once) {
        errors.spanned(
            word,
            "`reconcile` is only for `once` handlers, since a replayable handler simply runs again; add `once`, as in `#[rerun(once, reconcile = check_charge)]`",
        );
    }
    if let (Some((word, _)), None) = (&c.settle, &c.reconcile) {
        errors.spanned(
            word,
            "`settle` is how long a reconcile function waits for a dead attempt's effects to land, so it needs one; add it, as in `#[rerun(once, reconcile = check_charge, settle = \"5s\")]`, or remove `settle`",
        );
    }
    c
}

/// How a container argument found on a field is written on the type: with the arguments it
/// needs there, so that following the advice never leads to another error.
fn on_the_type(name: &str) -> &str {
    match name {
        "reconcile" => "once, reconcile = check_charge",
        "settle" => "once, reconcile = check_charge, settle = \"5s\"",
        other => FIELD
            .iter()
            .find(|k| k.name == other)
            .map_or(other, |k| k.example),
    }
}

fn variant(ident: Option<Ident>, fields: &Fields, span: Span, errors: &mut Errors) -> Variant {
    let named = matches!(fields, Fields::Named(_));
    let fields = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let member = match &f.ident {
                Some(id) => Member::Named(id.clone()),
                None => Member::Unnamed(syn::Index { index: i as u32, span: f.ty.span() }),
            };
            let mut field = Field {
                member,
                key: false,
                skip: false,
                span: f.span(),
                ty: f.ty.clone(),
            };
            let mut seen = Vec::new();
            for attr in rerun_attrs(&f.attrs) {
                for Arg { name, .. } in common::parse_attr_args(attr, "#[rerun]", FIELD, errors) {
                    let spelled = name.to_string();
                    if !common::first_time(&mut seen, &name, &spelled, errors) {
                        continue;
                    }
                    match spelled.as_str() {
                        "key" => field.key = true,
                        "skip" => field.skip = true,
                        other => errors.spanned(
                            &name,
                            format!("`{other}` goes on the type, not on a field: `#[rerun({})] struct …`", on_the_type(other)),
                        ),
                    }
                }
            }
            // The fingerprint takes each field as it is (`#[serde(…)]` on the field changes the
            // type's own serialization, not the fingerprint): only `#[rerun(skip)]` leaves it out.
            if !field.skip {
                if let Some(set) = common::hash_set_in(&f.ty) {
                    let what = match &f.ident {
                        Some(id) => format!("the field `{id}`"),
                        None => format!("field {i}"),
                    };
                    errors.spanned(
                        set,
                        common::hash_set_error(&what, "leave it out of the fingerprint with `#[rerun(skip)]`"),
                    );
                }
            }
            field
        })
        .collect();
    Variant {
        ident,
        fields,
        named,
        span,
    }
}
