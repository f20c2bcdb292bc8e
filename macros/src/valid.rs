//! The rules across keys, and between the keys and the function: everything
//! that can be refused before any code is generated.

use quote::ToTokens;
use syn::{FnArg, Pat, ReturnType, Type};

use crate::attr::{Args, Errors};
use crate::func::Func;

/// Past a handful, more retries only prolong an outage and multiply the load
/// on a dependency that is already failing. gRPC's retry design (gRFC A6)
/// caps `maxAttempts` at 5 by default; 10 leaves room, and anything above
/// it is almost certainly a mistake.
pub(crate) const MAX_RETRIES: u32 = 10;

/// The longest duration a key accepts: one day, in milliseconds. Longer is
/// a unit slip (seconds written as milliseconds), and a deadline past what
/// the clock can add to now would silently be no deadline at all.
pub(crate) const MAX_DURATION_MS: u64 = 24 * 60 * 60 * 1000;

/// What validation learned about the function, for the expansion.
pub(crate) struct Checked {
    /// Does any attempt after the first reuse the arguments?
    pub(crate) reuses_arguments: bool,
    /// Is `self` a shared pointer (`self: Arc<Self>`) that each attempt gets
    /// its own clone of?
    pub(crate) copies_receiver: bool,
    /// Indexes of parameters typed `IdempotencyKey`.
    pub(crate) key_params: Vec<usize>,
}

pub(crate) fn validate(args: &Args, func: &Func) -> syn::Result<Checked> {
    let mut errors = Errors::default();
    let sig = &func.sig;
    let retries = args.retries.as_ref().map_or(0, |r| r.value);

    // One attribute per function: a second would wrap the first, and the
    // outer layer's retries would multiply the inner one's (or, as the
    // inner call's failure is final, do nothing), which no one means.
    for attr in &func.attrs {
        if attr
            .path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "resilient")
        {
            errors.push_spanned(
                attr,
                "`#[resilient]` is given twice on this function: one attribute takes every key (`retries`, `breaker`, `deadline_ms`…); merge them into one",
            );
        }
    }

    // The same under another name (`use resilient::resilient as retry;`,
    // two `#[retry(…)]`), which the check above cannot recognise: the
    // outer attribute has expanded first, and this one finds its
    // expansion's first statement, the import of the crate under the name
    // only an expansion uses (review 44).
    if expanded_already(&func.body) {
        errors.push(
            proc_macro2::Span::call_site(),
            "`#[resilient]` is given twice on this function (one of them under another name, imported with `as`): one attribute takes every key (`retries`, `breaker`, `deadline_ms`…); merge them into one",
        );
    }

    // Keys on their own.
    if let Some(r) = &args.retries {
        if r.value == 0 {
            // Like `idempotent` alone: a reader would take the function
            // for one that is retried.
            errors.push_spanned(
                &r.tokens,
                "`retries = 0` makes no retry: remove `retries` (without it the function runs once), or give the number of retries after the first attempt",
            );
        }
        if r.value > MAX_RETRIES {
            errors.push_spanned(
                &r.tokens,
                format!(
                    "`retries = {}` is more than {MAX_RETRIES}: past a handful, retrying only prolongs an outage and multiplies the load on a failing dependency; use at most {MAX_RETRIES}",
                    r.value
                ),
            );
        }
    }
    for (key, value) in [
        ("deadline_ms", &args.deadline_ms),
        ("timeout_ms", &args.timeout_ms),
        ("base_ms", &args.base_ms),
        ("cap_ms", &args.cap_ms),
    ] {
        if let Some(v) = value {
            if v.value == 0 {
                errors.push_spanned(
                    &v.tokens,
                    format!("`{key} = 0` leaves no time at all; give a positive number of milliseconds, or remove `{key}`"),
                );
            } else if v.value > MAX_DURATION_MS {
                errors.push_spanned(
                    &v.tokens,
                    format!("`{key} = {}` is more than a day ({MAX_DURATION_MS} ms): no call to a dependency waits that long (was it meant in seconds?); give at most {MAX_DURATION_MS}, or remove `{key}`", v.value),
                );
            }
        }
    }
    if let (Some(t), Some(d)) = (&args.timeout_ms, &args.deadline_ms) {
        if t.value >= d.value && d.value > 0 {
            errors.push_spanned(
                &t.tokens,
                format!(
                    "`timeout_ms = {}` is not shorter than `deadline_ms = {}`, so the deadline always ends the attempt first; make the per-attempt timeout shorter, or remove it",
                    t.value, d.value
                ),
            );
        }
    }
    // Against the defaults too: `base_ms = 60000` alone is above the
    // default cap, `cap_ms = 50` alone below the default base.
    match (&args.base_ms, &args.cap_ms) {
        (Some(b), Some(c)) if b.value > c.value => errors.push_spanned(
            &b.tokens,
            format!("`base_ms = {}` is larger than `cap_ms = {}`: the first delay cannot exceed the largest; lower `base_ms` or raise `cap_ms`", b.value, c.value),
        ),
        (Some(b), None) if b.value > crate::expand::DEFAULT_CAP_MS => errors.push_spanned(
            &b.tokens,
            format!("`base_ms = {}` is larger than the default `cap_ms = {}`: the first delay cannot exceed the largest; lower `base_ms` or set a larger `cap_ms`", b.value, crate::expand::DEFAULT_CAP_MS),
        ),
        (None, Some(c)) if c.value < crate::expand::DEFAULT_BASE_MS => errors.push_spanned(
            &c.tokens,
            format!("`cap_ms = {}` is smaller than the default `base_ms = {}`: the largest delay cannot be below the first; raise `cap_ms` or set a smaller `base_ms`", c.value, crate::expand::DEFAULT_BASE_MS),
        ),
        _ => {}
    }
    // A backoff whose first delay is never shorter than the deadline: no
    // retry could start before it (a sleep that would end at or after the
    // deadline is not slept), so `retries` would never act (review 44).
    if let (true, Some(d)) = (retries > 0, &args.deadline_ms) {
        let strategy = args.backoff.as_ref().map_or("full_jitter", |b| b.value);
        let base = args
            .base_ms
            .as_ref()
            .map_or(crate::expand::DEFAULT_BASE_MS, |b| b.value);
        let shortest = match strategy {
            "exponential" | "decorrelated_jitter" => base,
            "equal_jitter" => base / 2,
            _ => 0,
        };
        if shortest >= d.value && d.value > 0 {
            let (tokens, base_text) = match &args.base_ms {
                Some(b) => (&b.tokens, format!("`base_ms = {base}`")),
                None => (
                    args.backoff.as_ref().map_or(&d.tokens, |b| &b.tokens),
                    format!("the default `base_ms = {base}`"),
                ),
            };
            errors.push_spanned(
                tokens,
                format!(
                    "`backoff = \"{strategy}\"` waits at least {shortest} ms before the first retry ({base_text}), not less than `deadline_ms = {}`, so no retry could ever start before the deadline; lower `base_ms`, use `backoff = \"full_jitter\"`, or raise `deadline_ms`",
                    d.value
                ),
            );
        }
    }
    // Without `retries` (not `retries = 0`, refused above: telling to add
    // the key written there would confuse).
    if args.retries.is_none() {
        for (key, tokens) in [
            ("backoff", args.backoff.as_ref().map(|b| &b.tokens)),
            ("base_ms", args.base_ms.as_ref().map(|b| &b.tokens)),
            ("cap_ms", args.cap_ms.as_ref().map(|b| &b.tokens)),
        ] {
            if let Some(tokens) = tokens {
                errors.push_spanned(
                    tokens,
                    format!("`{key}` has no effect without `retries`: add `retries = N`, or remove `{key}`"),
                );
            }
        }
        // The flag only allows retries: alone, it changes nothing, and a
        // reader would take the function for one that is retried.
        if let Some(span) = args.idempotent {
            errors.push(
                span,
                "`idempotent` has no effect without `retries`: it only allows a function to be retried; add `retries = N`, or remove `idempotent`",
            );
        }
    }
    // The function's shape.
    if sig.asyncness.is_none() {
        let looks_async_trait = sig
            .generics
            .lifetimes()
            .any(|l| l.lifetime.ident == "async_trait")
            || crate::func::mentions(&sig.output.to_token_stream(), "Future");
        if looks_async_trait {
            errors.push(
                sig.fn_token.span,
                "`#[resilient]` cannot wrap a function that returns a future, such as an `#[async_trait]` method; write a native `async fn` (stable in traits since Rust 1.75), or put `#[resilient]` on an inherent `async fn` that this method calls",
            );
        } else {
            errors.push(
                sig.fn_token.span,
                format!("`#[resilient]` can only be applied to an `async fn`: retries, timeouts and deadlines wrap a future; write `async fn {}`", sig.ident),
            );
        }
    }
    if let ReturnType::Default = sig.output {
        errors.push(
            sig.paren_token.span.close(),
            "`#[resilient]` functions must return `Result<T, E>`: add a return type such as `-> Result<(), MyError>`",
        );
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        if sig.asyncness.is_some() && crate::func::mentions(&ty.to_token_stream(), "impl") {
            errors.push_spanned(
                ty,
                "`#[resilient]` functions must name their return type: the engine passes `Result<T, E>` through, and an `impl Trait` in it cannot be named there; name the type, or box it (`Box<dyn Trait>`)",
            );
        }
    }

    // The idempotency rule.
    // A function marked `idempotent`, or not retried, needs no key: a
    // parameter named like one (another library's `IdempotencyKey`) is
    // then not checked.
    let key_params: Vec<usize> = if args.idempotent.is_some() || retries == 0 {
        Vec::new()
    } else {
        sig.inputs
            .iter()
            .enumerate()
            .filter_map(|(i, arg)| match arg {
                FnArg::Typed(t) if names_idempotency_key(&t.ty) => Some(i),
                _ => None,
            })
            .collect()
    };
    // A key under `#[cfg(…)]` may be compiled out, and the retries with it
    // would not be: only a key that is always there lets them be.
    let conditional = |i: &usize| match &sig.inputs[*i] {
        FnArg::Typed(t) => t.attrs.iter().any(compiles_out),
        FnArg::Receiver(_) => false,
    };
    // A key bound to `_` cannot be sent: the body has no name for it.
    let unnamed = |i: &usize| match &sig.inputs[*i] {
        FnArg::Typed(t) => binds_nothing(&t.pat),
        FnArg::Receiver(_) => false,
    };
    // A key whose every name starts with `_` (`_key`) is marked unused:
    // the function says it does not send it (review 44).
    let marked_unused = |i: &usize| match &sig.inputs[*i] {
        FnArg::Typed(t) => underscored_name(&t.pat),
        FnArg::Receiver(_) => None,
    };
    let always_keyed = key_params
        .iter()
        .any(|i| !conditional(i) && !unnamed(i) && marked_unused(i).is_none());
    let unsafe_retries = args
        .retries
        .as_ref()
        .filter(|r| r.value > 0 && args.idempotent.is_none() && !always_keyed);
    if let Some(r) = unsafe_retries {
        match key_params.first().map(|&i| (i, marked_unused(&i))) {
            Some((i, _)) if unnamed(&i) => errors.push_spanned(
                &sig.inputs[i],
                format!(
                    "`{}` may not be retried with this idempotency key: its pattern binds no name (`_`, `&_`, `Key {{ .. }}`), so the body cannot send it and the server could not recognise a retry as a repeat; name it (`key: {}`) and send it with the request, or add `idempotent` if running the function twice is harmless",
                    sig.ident,
                    match &sig.inputs[i] {
                        FnArg::Typed(t) => pretty(&t.ty),
                        FnArg::Receiver(_) => unreachable!("a key is a typed parameter"),
                    }
                ),
            ),
            Some((i, Some(name))) if !conditional(&i) => errors.push_spanned(
                &sig.inputs[i],
                format!(
                    "`{}` may not be retried with this idempotency key: its name `{name}` starts with `_`, which marks it unused, so the body does not send it and the server could not recognise a retry as a repeat; name it without the underscore (`{}`) and send it with the request, or add `idempotent` if running the function twice is harmless",
                    sig.ident,
                    // `__` leaves nothing: suggest a name.
                    match name.trim_start_matches('_') {
                        "" => "key",
                        rest => rest,
                    },
                ),
            ),
            Some((i, _)) => errors.push_spanned(
                &sig.inputs[i],
                format!(
                    "`{}` may not be retried with this idempotency key: it is under `{}`, and where it is compiled out the function would still be retried, with no key, and a retry could repeat its side effect; take the key whatever the configuration, or add `idempotent` if running it twice is harmless",
                    sig.ident,
                    // In the words the user wrote (review 40: a key under
                    // `cfg_attr(…, cfg(…))` was said to be under `cfg`).
                    match &sig.inputs[i] {
                        FnArg::Typed(t)
                            if !t.attrs.iter().any(|a| a.path().is_ident("cfg")) =>
                            "#[cfg_attr(…, cfg(…))]",
                        _ => "#[cfg(…)]",
                    }
                ),
            ),
            None => errors.push_spanned(
                &r.tokens,
                format!(
                    "`{}` may not be retried: it is not marked `idempotent` and takes no idempotency key, so a retry could repeat its side effect (charge twice, send twice); if running it twice is harmless, add `idempotent`; otherwise take a `resilient::IdempotencyKey` parameter, created once per operation, and send it so the server can recognise a repeat (the key is recognised by its type's name, `IdempotencyKey`, also behind `&`, `Arc`, `Rc` or `Box`: a type alias hides it)",
                    sig.ident
                ),
            ),
        }
    }

    // Arguments reused across attempts.
    let reuses_arguments = retries > 0 || args.fallback.is_some();
    let mut copies_receiver = false;
    // The key that makes them reused, to name in the messages.
    let reuser = if retries > 0 { "retries" } else { "fallback" };
    // Why `&mut self` and `self` by value cannot be reused: by retries, or
    // by the call and then its fallback.
    let (self_lent, self_consumed) = if retries > 0 {
        (
            "cannot be lent to every attempt: an attempt may still hold it when the next begins",
            "cannot be passed to every attempt: the first attempt consumes it",
        )
    } else {
        (
            "cannot be lent to both the call and its fallback: the call's attempt and the fallback each get it",
            "cannot be passed to both the call and its fallback: the call consumes it, and the fallback gets it after",
        )
    };
    if reuses_arguments {
        for arg in &sig.inputs {
            if let FnArg::Typed(t) = arg {
                if let Some(reference) = lent_mutably(&t.ty) {
                    let shared = &reference.elem;
                    let why = if retries > 0 {
                        "cannot be lent to every attempt: an attempt may still hold it when the next begins"
                    } else {
                        "cannot be lent to both the call and its fallback: the call's attempt and the fallback each get the arguments"
                    };
                    // Held inside the argument (`Option<&mut T>`, a tuple):
                    // named, since the argument's own type is not the
                    // reference.
                    let what = if matches!(ungrouped(&t.ty), Type::Reference(_)) {
                        format!("`{}`", pretty(&t.ty))
                    } else {
                        format!(
                            "`{}` holds `{}`, which",
                            pretty(&t.ty),
                            pretty(&Type::Reference(reference.clone()))
                        )
                    };
                    errors.push_spanned(
                        &t.ty,
                        format!(
                            "{what} {why}; take `&{}` (with interior mutability if it must change), or remove `{reuser}`",
                            pretty(shared)
                        ),
                    );
                }
            }
            if let FnArg::Receiver(r) = arg {
                // `r.ty` is the receiver's full type, for `&mut self` and
                // `self: &mut Self` alike.
                match receiver_kind(&r.ty) {
                    Receiver::Borrowed => {}
                    Receiver::Shared => copies_receiver = true,
                    Receiver::BorrowedMutably => errors.push_spanned(
                        r,
                        format!("`self` borrowed mutably {self_lent}; take `&self` (with interior mutability), or remove `{reuser}`"),
                    ),
                    Receiver::Owned => errors.push_spanned(
                        r,
                        format!("`self` by value {self_consumed}; take `&self` or `self: Arc<Self>`, or remove `{reuser}`"),
                    ),
                }
            }
        }
    }
    errors.finish()?;
    Ok(Checked {
        reuses_arguments,
        copies_receiver,
        key_params,
    })
}

/// The names a pattern binds, collected into `out`; `false` if the pattern
/// has a part this walk does not read (a literal, a range, a path, an
/// or-pattern, a macro, a type ascription), which may bind or match
/// anything.
fn bound_names(pat: &Pat, out: &mut Vec<String>) -> bool {
    match pat {
        Pat::Wild(_) | Pat::Rest(_) => true,
        Pat::Ident(i) => {
            out.push(i.ident.to_string());
            i.subpat
                .as_ref()
                .is_none_or(|(_, sub)| bound_names(sub, out))
        }
        Pat::Paren(p) => bound_names(&p.pat, out),
        Pat::Reference(r) => bound_names(&r.pat, out),
        Pat::Tuple(t) => all_bound_names(&t.elems, out),
        Pat::TupleStruct(t) => all_bound_names(&t.elems, out),
        Pat::Slice(s) => all_bound_names(&s.elems, out),
        Pat::Struct(s) => all_bound_names(s.fields.iter().map(|f| &*f.pat), out),
        Pat::Type(t) => {
            bound_names(&t.pat, out);
            false
        }
        _ => false,
    }
}

/// [`bound_names`] of every pattern in `pats`, all of them read, also
/// past one that is not.
fn all_bound_names<'p>(pats: impl IntoIterator<Item = &'p Pat>, out: &mut Vec<String>) -> bool {
    let mut known = true;
    for pat in pats {
        known &= bound_names(pat, out);
    }
    known
}

/// The first name a pattern binds, if it binds some and every one starts
/// with `_` (`_key`, `Key { id: _id }`): the way Rust marks a value unused.
fn underscored_name(pat: &Pat) -> Option<String> {
    let mut all = Vec::new();
    bound_names(pat, &mut all);
    let first = all.first()?.clone();
    all.iter().all(|n| n.starts_with('_')).then_some(first)
}

/// A pattern that gives the body no name for any part of the value: `_`,
/// `(_)`, `&_`, `Key { .. }`, `(_, _)` (review 30: `&_` and `Key { .. }`
/// hid an idempotency key as `_` did).
fn binds_nothing(pat: &Pat) -> bool {
    let mut names = Vec::new();
    bound_names(pat, &mut names) && names.is_empty()
}

/// How a method takes `self`, as far as reusing it across attempts goes.
enum Receiver {
    /// `&self`, `self: &Self`: every attempt borrows it.
    Borrowed,
    /// `self: Arc<Self>`, `Rc<Self>`, `Pin<Arc<Self>>`, `Pin<&Self>`: a
    /// pointer that is `Clone` whatever `Self` is, so every attempt gets
    /// its own clone (the expansion checks it is `Clone`).
    Shared,
    /// `&mut self`, `self: &mut Self`, `self: Pin<&mut Self>`.
    BorrowedMutably,
    /// `self`, `self: Self`, `self: Box<Self>`: the first attempt consumes
    /// it. Cloning all of `self` for every attempt would be a surprise; a
    /// `Self: Clone` that wants it can take `self: Arc<Self>`.
    Owned,
}

/// `#[cfg(…)]`, or a `#[cfg_attr(…, cfg(…))]` that may become one, also
/// through nested `cfg_attr`s (`cfg_attr(p, cfg_attr(q, cfg(…)))`, review
/// 44): an argument under it may be compiled out (review 40: under
/// `cfg_attr`, the expansion kept using a key that was gone).
pub(crate) fn compiles_out(attr: &syn::Attribute) -> bool {
    if attr.path().is_ident("cfg") {
        return true;
    }
    if !attr.path().is_ident("cfg_attr") {
        return false;
    }
    let syn::Meta::List(list) = &attr.meta else {
        return false;
    };
    cfg_attr_may_add_cfg(list.tokens.clone())
}

/// The inside of `cfg_attr(predicate, attr, …)`: is one of the attributes
/// `cfg`, or a `cfg_attr` that may add one?
fn cfg_attr_may_add_cfg(tokens: proc_macro2::TokenStream) -> bool {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let Some(first_comma) = tokens
        .iter()
        .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
    else {
        return false;
    };
    let rest = &tokens[first_comma + 1..];
    rest.iter().enumerate().any(|(i, t)| match t {
        TokenTree::Ident(name) if name == "cfg" => true,
        TokenTree::Ident(name) if name == "cfg_attr" => match rest.get(i + 1) {
            Some(TokenTree::Group(inner)) => cfg_attr_may_add_cfg(inner.stream()),
            _ => false,
        },
        _ => false,
    })
}

/// A `&mut` reference an argument of this type holds by value, so that no
/// copy of the argument can be made for another attempt: the argument
/// itself, or one inside a tuple, an array, or the type arguments of the
/// standard containers that are `Clone` only when what they hold is
/// (`Option`, `Result`, `Pin`, `Box`, `Vec`, `VecDeque`). By name, since
/// types are not known to a macro; others (`Arc`, `PhantomData`, function
/// pointers, a shared reference to anything) are `Clone` whatever they
/// hold, and are left to the compiler.
fn lent_mutably(ty: &Type) -> Option<&syn::TypeReference> {
    match ungrouped(ty) {
        Type::Reference(r) if r.mutability.is_some() => Some(r),
        Type::Paren(p) => lent_mutably(&p.elem),
        Type::Tuple(t) => t.elems.iter().find_map(lent_mutably),
        Type::Array(a) => lent_mutably(&a.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            let holds_by_value = ["Option", "Result", "Pin", "Box", "Vec", "VecDeque"]
                .iter()
                .any(|name| last.ident == name);
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            if !holds_by_value {
                return None;
            }
            args.args.iter().find_map(|arg| match arg {
                syn::GenericArgument::Type(t) => lent_mutably(t),
                _ => None,
            })
        }
        _ => None,
    }
}

/// `ty` without the invisible group a `macro_rules!` `$t:ty` fragment puts
/// around it (review 40: a key type passed so was not recognised).
fn ungrouped(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => ungrouped(&g.elem),
        other => other,
    }
}

/// By name, since types are not known to a macro: `Arc` and `Rc` under any
/// path (`std::sync::Arc`, `alloc::rc::Rc`).
fn receiver_kind(ty: &Type) -> Receiver {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => Receiver::BorrowedMutably,
        Type::Reference(_) => Receiver::Borrowed,
        Type::Paren(p) => receiver_kind(&p.elem),
        Type::Group(g) => receiver_kind(&g.elem),
        Type::Path(p) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else {
                return Receiver::Owned;
            };
            if last.ident == "Arc" || last.ident == "Rc" {
                return Receiver::Shared;
            }
            if last.ident == "Pin" {
                if let syn::PathArguments::AngleBracketed(a) = &last.arguments {
                    if let (1, Some(syn::GenericArgument::Type(inner))) =
                        (a.args.len(), a.args.first())
                    {
                        return match receiver_kind(inner) {
                            Receiver::Borrowed | Receiver::Shared => Receiver::Shared,
                            other => other,
                        };
                    }
                }
            }
            Receiver::Owned
        }
        _ => Receiver::Owned,
    }
}

/// `IdempotencyKey`, `&IdempotencyKey`, `resilient::IdempotencyKey`,
/// `Arc<IdempotencyKey>`, …: by name, since types are not known to a macro.
/// The expansion then checks the type really is `resilient::IdempotencyKey`
/// (behind references, `Arc`, `Rc` or `Box`: every attempt's copy of such a
/// pointer is the same key).
fn names_idempotency_key(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => names_idempotency_key(&r.elem),
        Type::Paren(p) => names_idempotency_key(&p.elem),
        Type::Group(g) => names_idempotency_key(&g.elem),
        Type::Path(p) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            if last.ident == "IdempotencyKey" {
                return true;
            }
            if !(last.ident == "Arc" || last.ident == "Rc" || last.ident == "Box") {
                return false;
            }
            match &last.arguments {
                syn::PathArguments::AngleBracketed(a) => match (a.args.len(), a.args.first()) {
                    (1, Some(syn::GenericArgument::Type(inner))) => names_idempotency_key(inner),
                    _ => false,
                },
                _ => false,
            }
        }
        _ => false,
    }
}

/// A type as a user would write it: `&mut Vec<u8>`, not `& mut Vec < u8 >`.
fn pretty(tokens: &impl ToTokens) -> String {
    let text = tokens.to_token_stream().to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let prev = out.chars().last();
        let drop_space = c == ' '
            && (matches!(prev, Some('&' | '<' | ':' | '(' | '[') | None)
                || matches!(next, Some('<' | '>' | ',' | ':' | ')' | ']')));
        if !drop_space {
            out.push(c);
        }
    }
    out
}

/// Is `body` the expansion of `#[resilient]` (under whatever name it was
/// imported)? Every expansion begins with `use … as __resilient_crate;`,
/// a name no hand-written body has.
fn expanded_already(body: &proc_macro2::Group) -> bool {
    body.stream()
        .into_iter()
        .take_while(|tt| !matches!(tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == ';'))
        .any(|tt| matches!(tt, proc_macro2::TokenTree::Ident(i) if i == crate::expand::CRATE_ALIAS))
}
