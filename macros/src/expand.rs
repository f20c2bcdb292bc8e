//! Generating the wrapped function. See the `resilient` crate docs for what
//! the expansion looks like and why.

use proc_macro2::{Delimiter, Group, Spacing, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Pat, PatIdent, Path, ReturnType};

use crate::attr::Args;
use crate::func::Func;
use crate::valid::Checked;

/// `tokens` with every span set to `span`: the crate path placed in a
/// check spanned at the user's code, so the whole check, path included,
/// points there and not at the attribute.
fn respan(tokens: &impl ToTokens, span: Span) -> TokenStream {
    tokens
        .to_token_stream()
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan(&g.stream(), span));
                group.set_span(span);
                tt = TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// `tokens` with the first at `first` and the rest at `rest`: rustc spans
/// an expression or type from its first token to its last.
fn opened_at(tokens: &TokenStream, first: Span, rest: Span) -> TokenStream {
    let mut tokens = respan(tokens, rest).into_iter();
    let Some(mut head) = tokens.next() else {
        return TokenStream::new();
    };
    head.set_span(first);
    std::iter::once(head).chain(tokens).collect()
}

/// `ident`, reported at `location` but resolved with its own hygiene.
fn at(ident: &syn::Ident, location: Span) -> syn::Ident {
    let mut moved = ident.clone();
    moved.set_span(ident.span().located_at(location));
    moved
}

/// The name an expansion imports the crate under, in its first statement:
/// also how a second attribute recognises the first one's expansion
/// (`valid::expanded_already`).
pub(crate) const CRATE_ALIAS: &str = "__resilient_crate";

pub(crate) fn expand(args: &Args, func: Func, checked: &Checked) -> TokenStream {
    // The crate, imported once, under a local name every generated path
    // starts with: a crate that is not there (the dependency renamed in
    // Cargo.toml, and no `crate = "…"`) is one error, at the attribute (or
    // at `crate = "…"`), rather than one at each path; rustc reports no
    // more through a failed import.
    let (crate_path, import_span) = match &args.krate {
        Some(k) => (k.value.to_token_stream(), k.value.span()),
        None => (quote!(::resilient), Span::call_site()),
    };
    let krate: Path = format_ident!(
        "__resilient",
        span = Span::mixed_site().located_at(import_span)
    )
    .into();
    // The crate's `__private` module, where every generated path goes: a
    // `crate = "…"` naming a crate that is there but is not this one
    // (`crate = "tokio"`) is also one error, at the import (review 44: four
    // errors about `__private`).
    let root = format_ident!(
        "{}",
        CRATE_ALIAS,
        span = Span::mixed_site().located_at(import_span)
    );
    let import = quote_spanned! {import_span=>
        use #crate_path as #root;
        use #root::__private as #krate;
    };
    let Func {
        attrs,
        vis,
        sig,
        body,
    } = func;
    let ReturnType::Type(_, ret) = &sig.output else {
        unreachable!("validated: the function returns a `Result`");
    };

    let mut outer_sig = sig.clone();
    let mut checks = Vec::new();
    let mut rebinds = Vec::new();
    // Pattern arguments, destructured inside each attempt's future.
    let mut destructures = Vec::new();
    // The arguments as the outer function binds them, to pass to a fallback:
    // located at the fallback's path, so that a fallback taking the wrong
    // arguments is reported there, and rustc does not offer to remove
    // parameters from the annotated function to make the call fit.
    let mut call_args = Vec::new();
    let fallback_at = args
        .fallback
        .as_ref()
        .and_then(|f| f.tokens.clone().into_iter().next())
        .map(|t| t.span());
    if checked.reuses_arguments {
        for (i, arg) in outer_sig.inputs.iter_mut().enumerate() {
            let typed = match arg {
                FnArg::Receiver(r) => {
                    let mut self_token = r.self_token;
                    if let Some(location) = fallback_at {
                        self_token.span = self_token.span.located_at(location);
                    }
                    call_args.push(self_token.to_token_stream());
                    if checked.copies_receiver {
                        // `self: Arc<Self>`: each attempt gets its own
                        // clone, under the name the body's `self` is
                        // renamed to (see `rename_self`). Reported at the
                        // receiver's type if not `Clone`, like an argument.
                        let ty_span = r.ty.span();
                        let krate_at_ty = respan(&krate, ty_span);
                        let mutability = r.mutability.take();
                        let copy = self_copy(r.self_token.span);
                        let source = syn::Ident::new("self", r.self_token.span.located_at(ty_span));
                        rebinds.push(quote_spanned! {ty_span=>
                            #[allow(clippy::used_underscore_binding)]
                            let #mutability #copy = #krate_at_ty::ReusableArgument::reuse(&#source);
                        });
                    }
                    continue;
                }
                FnArg::Typed(typed) => typed,
            };
            let ty_span = typed.ty.span();
            let krate_at_ty = respan(&krate, ty_span);
            // A parameter compiled out (`#[cfg(…)]`, or a `cfg_attr` that
            // makes one) is copied and passed on under the same condition.
            let cfgs: Vec<syn::Attribute> = typed
                .attrs
                .iter()
                .filter(|a| crate::valid::compiles_out(a))
                .cloned()
                .collect();
            // Its lint levels (`#[allow(unused_variables)]`) go with each
            // attempt's copy, which the body uses in its place.
            let lints: Vec<syn::Attribute> = typed
                .attrs
                .iter()
                .filter(|a| {
                    ["allow", "expect", "warn", "deny", "forbid"]
                        .iter()
                        .any(|lint| a.path().is_ident(lint))
                })
                .cloned()
                .collect();
            // The outer binding is used (copied from): an expectation it
            // would leave unfulfilled is the copy's, and stays an `allow`
            // here.
            for attr in &mut typed.attrs {
                if attr.path().is_ident("expect") {
                    if let syn::Meta::List(list) = &mut attr.meta {
                        list.path = syn::Path::from(syn::Ident::new("allow", list.path.span()));
                    }
                }
            }
            // The name the outer function binds this argument to.
            let name = match &mut *typed.pat {
                Pat::Ident(PatIdent {
                    by_ref: None,
                    subpat: None,
                    ident,
                    mutability,
                    ..
                }) => {
                    // `mut` moves to each attempt's own copy, where the body
                    // mutates it; the outer binding is never mutated.
                    let mutability = mutability.take();
                    // The copy is made by a call located at the argument's
                    // type, so a non-`Clone` argument is reported there,
                    // once; the name keeps its own hygiene, so parameters
                    // named by a `macro_rules!` caller still resolve.
                    // An `_`-named argument is the user's to leave unused:
                    // the copy that reads it is the expansion's (review 44:
                    // clippy's `used_underscore_binding` at the type).
                    let source = at(ident, ty_span);
                    rebinds.push(quote_spanned! {ty_span=>
                        #(#cfgs)*
                        #(#lints)*
                        #[allow(clippy::used_underscore_binding)]
                        let #mutability #ident = #krate_at_ty::ReusableArgument::reuse(&#source);
                    });
                    ident.clone()
                }
                pat => {
                    let name = format_ident!("__resilient_arg_{}", i, span = Span::mixed_site());
                    let original = std::mem::replace(
                        pat,
                        Pat::Ident(PatIdent {
                            attrs: Vec::new(),
                            by_ref: None,
                            mutability: None,
                            ident: name.clone(),
                            subpat: None,
                        }),
                    );
                    // `_` binds nothing: there is nothing to copy.
                    if !matches!(original, Pat::Wild(_)) {
                        // Copy in the closure, destructure inside the
                        // attempt's future, so that `ref` bindings borrow
                        // from the future's own copy.
                        let copy =
                            format_ident!("__resilient_copy_{}", i, span = Span::mixed_site());
                        // Read in a block of the argument type's span, so
                        // that a type that cannot be copied is reported
                        // there, as a named argument's is: the name is the
                        // expansion's (hygienic), and an argument from
                        // another context than the call's is reported at the
                        // attribute.
                        let source = quote_spanned! {ty_span=> { &#name }};
                        // `mut`: a `ref mut` binding in the pattern borrows
                        // the copy mutably (review 40: refused).
                        rebinds.push(quote_spanned! {ty_span=>
                            #(#cfgs)*
                            #[allow(unused_mut, unused_braces)]
                            let mut #copy = #krate_at_ty::ReusableArgument::reuse(#source);
                        });
                        destructures.push(quote! { #(#cfgs)* #(#lints)* let #original = #copy; });
                    }
                    name
                }
            };
            let passed = fallback_at.map_or_else(|| name.clone(), |location| at(&name, location));
            call_args.push(quote!(#(#cfgs)* #passed));
            if checked.key_params.contains(&i) {
                let source = at(&name, ty_span);
                checks.push(quote_spanned! {ty_span=>
                    #(#cfgs)*
                    #[allow(clippy::used_underscore_binding)]
                    let () = #krate_at_ty::idempotency_key(&#source);
                });
            }
        }
    }
    // The engine's bounds (a `Result` whose error converts from
    // `resilient::Error` and, when looked at, implements `Classify`) are
    // checked at the engine call, spanned at the return type.
    let ret_span = ret.span();
    let krate_at_ret = respan(&krate, ret_span);
    // The engine runs on `Result<T, E>` whatever the function declares:
    // each attempt's output is turned into one by a closure written here,
    // and the engine's back into the declared type, so that a type that is
    // no `Result` fails only these conversions (see `__private::AsResult`),
    // each spanned over the whole return type: rustc reports the same
    // failure at the same place once. The return type is named, so that the
    // engine's errors speak of `u32`, not of what the body happened to
    // return (validation refused an `impl Trait`, which could not be).
    let ret_last = ret
        .to_token_stream()
        .into_iter()
        .last()
        .map_or(ret_span, |t| t.span());
    // `before`, the return type, `after`: opened at the type's first token,
    // closed at its last, so rustc's span for it covers the type.
    let over_ret = |before: TokenStream, after: TokenStream| {
        let mut tokens = opened_at(&before, ret_span, ret_last);
        ret.to_tokens(&mut tokens);
        tokens.extend(respan(&after, ret_last));
        tokens
    };
    let engine_ret = over_ret(quote!(#krate::ResultOf<), quote!(>));
    // The engine, named with its `Result` over the return type too: the
    // signature is instantiated there.
    let engine = |name: &str| {
        let name = format_ident!("{}", name);
        let mut path = opened_at(&quote!(#krate::#name::<), ret_span, ret_last);
        path.extend(engine_ret.clone());
        path.extend(respan(&quote!(, _, _, _, _>), ret_last));
        path
    };
    let qualified = |item: &str| {
        let item = format_ident!("{}", item);
        over_ret(quote!(<), quote!(as #krate::ReturnsResult>::#item))
    };
    let output = format_ident!("__resilient_output", span = Span::mixed_site());
    // Each attempt's output into a `Result`: a closure, not the function
    // (whose type carries the failing bound, as for `classify_by_trait`
    // below), defined by a statement where clippy can be told it is needed.
    let into_result = qualified("into_result");
    let into = format_ident!("__resilient_into_result", span = Span::mixed_site());
    let define_into_result = quote_spanned! {ret_last=>
        #[allow(clippy::redundant_closure)]
        let #into = |#output| #into_result(#output);
    };
    let from_result = qualified("from_result");
    let new_probe = over_ret(
        quote!(#krate::DisplayProbe::<<),
        quote!(as #krate::ReturnsResult>::Error>::new),
    );
    let refusal_into = over_ret(quote!(#krate::refusal_into::<), quote!(>));

    // Each attempt's future: the body, in an `async move` block that knows
    // the declared return type before it reads the body (see `attempt_block`).
    let body = if checked.copies_receiver {
        let mut renamed = Group::new(body.delimiter(), rename_self(body.stream()));
        renamed.set_span(body.span());
        renamed
    } else {
        body
    };
    let attempt = attempt_block(&body, &destructures, ret);

    let retries = args.retries.as_ref().map_or(0, |r| r.value);
    // How the engine classifies failures, and a statement that defines it
    // in the outer body, if it needs one.
    let classify_ident = format_ident!("__resilient_classify", span = Span::mixed_site());
    let (classifier, define_classifier) = match &args.classify {
        // The user's function, in a closure whose signature the engine
        // gives (so an argument of another type is rustc's plain E0308 at
        // the path) and whose result is checked to be a `Classification`
        // (with a message saying so, not naming the engine's own type).
        // Both at the path: its call covers it, from its first token to its
        // last; the argument, of the call's hygiene (or rustc reports at the
        // attribute), is at its last.
        Some(path) => {
            let path = &path.value;
            let first = path.span();
            let last = path
                .to_token_stream()
                .into_iter()
                .last()
                .map_or(first, |t| t.span());
            let failure = format_ident!("__resilient_failure", span = last);
            let check = opened_at(&quote!(#krate::classification), first, last);
            let call = quote_spanned!(last=> #path(#failure));
            // What the error's own `Classify` impl, if it has one, says
            // besides: whether the failure may have taken effect, and
            // whether it is a refusal (found as for `None` below).
            let effect = format_ident!("__resilient_effect", span = Span::mixed_site());
            let new_classify_probe = over_ret(
                quote!(#krate::ClassifyProbe::<<),
                quote!(as #krate::ReturnsResult>::Error>::new),
            );
            let define = quote_spanned! {ret_span=>
                let #effect = {
                    #[allow(unused_imports)]
                    use #krate_at_ret::{ViaClassify as _, ViaUnclassified as _};
                    #[allow(clippy::needless_borrow)]
                    let #effect = (&#new_classify_probe()).__resilient_effect();
                    #effect
                };
            };
            let classifier = quote_spanned!(first=> move |#failure| #krate::with_effect(#check(#call), #effect(#failure)));
            (classifier, define)
        }
        // A closure, not the function itself: the engine's future names the
        // classifier's type, and a function's type carries its bound
        // (`E: Classify`), which rustc would check again, and report again,
        // wherever that future is named (at its `.await`); a closure's
        // carries none. The argument has the hygiene of the call around it,
        // or rustc reports a missing `Classify` at the attribute (no user
        // code can see it: the closure's body is this call only). Defined
        // by a statement, where clippy can be told the closure is needed.
        None if retries > 0 || args.breaker.is_some() || args.budget.is_some() => {
            let failure = format_ident!("__resilient_failure", span = ret_span);
            let define = quote_spanned! {ret_span=>
                #[allow(clippy::redundant_closure)]
                let #classify_ident = |#failure: &_| #krate_at_ret::classify_by_trait(#failure);
            };
            (classify_ident.to_token_stream(), define)
        }
        // A function that needs no classification to run (no retries, no
        // statistics) still classifies what it reports, when its error type
        // can be: found here, where the type is concrete, by autoref
        // specialisation (as `describe` below), without requiring it.
        // Method lookup ignores lifetimes: an error type `E<'a>` whose only
        // impl is for `E<'static>` fails to compile here (attribute.md says
        // how to fix it). Guessing from the tokens which types may borrow
        // was tried and dropped: it missed `Self` and aliases, and silently
        // stopped classifying common types (`E<'a>` with `impl Classify
        // for E<'_>`, aliases over borrowed success types).
        None => {
            let probe = format_ident!("__resilient_classifier", span = Span::mixed_site());
            let new_classify_probe = over_ret(
                quote!(#krate::ClassifyProbe::<<),
                quote!(as #krate::ReturnsResult>::Error>::new),
            );
            let classifier = quote_spanned! {ret_span=> {
                #[allow(unused_imports)]
                use #krate_at_ret::{ViaClassify as _, ViaUnclassified as _};
                #[allow(clippy::needless_borrow)]
                let #probe = (&#new_classify_probe()).__resilient_classifier();
                #probe
            }};
            (classifier, TokenStream::new())
        }
    };

    let name = sig.ident.to_string();
    let mut policy = quote! {
        #krate::Policy::new(::core::concat!(::core::module_path!(), "::", #name))
    };
    if retries > 0 {
        policy.extend(quote!(.retries(#retries)));
        let strategy = format_ident!(
            "{}",
            args.backoff.as_ref().map_or("full_jitter", |b| b.value)
        );
        let base = args.base_ms.as_ref().map_or(DEFAULT_BASE_MS, |b| b.value);
        let cap = args.cap_ms.as_ref().map_or(DEFAULT_CAP_MS, |c| c.value);
        policy.extend(quote! {
            .backoff(#krate::Backoff::#strategy(
                ::core::time::Duration::from_millis(#base),
                ::core::time::Duration::from_millis(#cap),
            ))
        });
    }
    if let Some(d) = &args.deadline_ms {
        let ms = d.value;
        policy.extend(quote!(.deadline_ms(#ms)));
    }
    if let Some(t) = &args.timeout_ms {
        let ms = t.value;
        policy.extend(quote!(.timeout_ms(#ms)));
    }
    if args.fallback.is_some() {
        policy.extend(quote!(.fallback()));
    }
    for (method, name) in [
        ("breaker", &args.breaker),
        ("budget", &args.budget),
        ("bulkhead", &args.bulkhead),
    ] {
        if let Some(name) = name {
            let method = format_ident!("{}", method);
            let lit = &name.value;
            policy.extend(quote!(.#method(#lit)));
        }
    }

    // The function's names, recorded at link time so that a strict registry
    // lacking one is refused at start-up (`Registry::check_names`).
    let site = if args.breaker.is_some() || args.budget.is_some() || args.bulkhead.is_some() {
        let names = [&args.breaker, &args.budget, &args.bulkhead].map(|name| match name {
            Some(name) => {
                let lit = &name.value;
                quote!(::core::option::Option::Some(#lit))
            }
            None => quote!(::core::option::Option::None),
        });
        let [breaker, budget, bulkhead] = names;
        let line = quote_spanned!(sig.ident.span()=> ::core::line!());
        quote! {
            #krate::__resilient_site!(#krate::Site::new(
                ::core::concat!(::core::module_path!(), "::", #name),
                ::core::file!(),
                #line,
                #breaker,
                #budget,
                #bulkhead,
            ));
        }
    } else {
        TokenStream::new()
    };

    let policy_ident = format_ident!("__RESILIENT_POLICY", span = Span::mixed_site());
    // How telemetry shows the function's error: by its `Display` when the
    // named error type has one (found here, where the type is concrete, by
    // autoref specialisation), else by its type name.
    let describe = {
        let probe = format_ident!("__resilient_describe", span = Span::mixed_site());
        quote_spanned! {ret_span=> {
            #[allow(unused_imports)]
            use #krate_at_ret::{ViaDisplay as _, ViaTypeName as _};
            #[allow(clippy::needless_borrow)]
            let #probe = (&#new_probe()).__resilient_describer();
            #probe
        }}
    };
    // The call, awaited: an expression of the declared return type.
    // The first attempt runs on the engine's lean path; a function that
    // names a breaker, budget or bulkhead gets the entry that admits it
    // there and records its outcome (and can hand a call over before its
    // first attempt, to wait for a bulkhead slot).
    let names_parts = args.breaker.is_some() || args.budget.is_some() || args.bulkhead.is_some();
    let retry_engine = engine(if names_parts {
        "retry_parts"
    } else {
        "retry_lean"
    });
    let once_engine = engine(if names_parts {
        "once_parts"
    } else {
        "once_lean"
    });
    let call = if checked.reuses_arguments {
        // Without a fallback, nothing needs the arguments after the engine:
        // the maker of attempts owns them (a `move` closure), so the future
        // holds each argument, not a reference to it, and is `Send` when
        // the arguments are, `Sync` or not. A fallback takes them after the
        // engine, so the engine borrows them then.
        let capture = if args.fallback.is_none() {
            quote!(move)
        } else {
            TokenStream::new()
        };
        let engine = quote_spanned! {ret_span=>
            #retry_engine(&#policy_ident, #classifier, #refusal_into(), #describe, #capture || {
                #(#rebinds)*
                #define_into_result
                #krate_at_ret::as_result(async move #attempt, #into)
            })
        };
        match &args.fallback {
            None => quote_spanned!(ret_last=> #from_result(#engine.await)),
            Some(fallback) => {
                let path = &fallback.value;
                let value = format_ident!("__resilient_value", span = Span::mixed_site());
                let error = format_ident!("__resilient_error", span = Span::mixed_site());
                // The engine borrowed the arguments; they are free again for
                // the fallback, which is awaited by the outer `.await` below.
                let fallback_span = fallback
                    .tokens
                    .clone()
                    .into_iter()
                    .next()
                    .map_or(ret_span, |t| t.span());
                let krate_at_fallback = respan(&krate, fallback_span);
                let final_error = over_ret(quote!(#krate::final_error::<), quote!(>));
                let final_error = quote_spanned!(ret_last=> #final_error(#error));
                let in_flight = format_ident!("__resilient_in_flight", span = Span::mixed_site());
                let call_fallback = quote_spanned! {fallback_span=>
                    #krate_at_fallback::fallback::<#ret, _>(&#in_flight, #path(#(#call_args,)* #final_error)).await
                };
                let held = format_ident!("__resilient_held", span = Span::mixed_site());
                let answer = format_ident!("__resilient_answer", span = Span::mixed_site());
                let is_failure = qualified("is_failure");
                // Counted by a graceful shutdown from before the engine
                // (whose count ends with it) until the fallback has answered.
                // The error is taken out of the engine's answer in a
                // statement of its own, which ends before the fallback is
                // awaited: a `match` on the answer would hold it across
                // that `.await` (review 41: an error or output type that is
                // not `Send` made the future not `Send`).
                quote_spanned! {ret_span=>
                    async {
                        let #in_flight = #krate::fallback_hold();
                        let #error = match #engine.await {
                            ::core::result::Result::Ok(#value) => {
                                return #from_result(::core::result::Result::Ok(#value));
                            }
                            ::core::result::Result::Err(#error) => #error,
                        };
                        let #held = #krate::fallback_served(&#policy_ident, &#in_flight);
                        #[allow(clippy::used_underscore_binding)]
                        let #answer = #call_fallback;
                        #krate::fallback_ended(#held, #is_failure(&#answer));
                        #answer
                    }.await
                }
            }
        }
    } else {
        quote_spanned! {ret_span=>
            #from_result(#once_engine(&#policy_ident, #classifier, #refusal_into(), #describe, move || {
                #define_into_result
                #krate_at_ret::as_result(async move #attempt, #into)
            }).await)
        }
    };
    let mut outer_body = Group::new(
        Delimiter::Brace,
        quote! {
            #import
            #(#checks)*
            #site
            static #policy_ident: #krate::Policy = #policy;
            #define_classifier
            #call
        },
    );
    outer_body.set_span(body.span());
    quote! {
        #(#attrs)*
        #vis #outer_sig #outer_body
    }
}

/// The block of an attempt's `async move`: the user's body, spliced into
/// braces that carry the body's own span, after the pattern arguments'
/// destructuring and an unreachable `return` of the declared type.
///
/// That `return` comes first, so the block's output type is the function's
/// declared one before any of the body is checked: a mismatch inside the
/// body (`return Err(io_error)` where the function says `PayError`, a tail
/// of the wrong type) is reported as rustc's plain E0308 at the user's
/// expression, as it would be without the attribute, instead of at the
/// return type naming `{async block}` and the engine. `#[tracing::instrument]`
/// does the same. The body's statements are spliced, not nested as a
/// block, so a one-line body (`{ g().await }`) does not become `{ { … } }`,
/// which rustc warns about (`unused_braces`) in the user's code; its inner
/// attributes (`#![allow(…)]`) stay first.
fn attempt_block(body: &Group, destructures: &[TokenStream], ret: &syn::Type) -> Group {
    let tokens: Vec<TokenTree> = body.stream().into_iter().collect();
    let mut inner_attrs = 0;
    while let [
        TokenTree::Punct(hash),
        TokenTree::Punct(bang),
        TokenTree::Group(g),
        ..,
    ] = &tokens[inner_attrs..]
    {
        if hash.as_char() != '#' || bang.as_char() != '!' || g.delimiter() != Delimiter::Bracket {
            break;
        }
        inner_attrs += 3;
    }
    let (attrs, stmts) = tokens.split_at(inner_attrs);
    let attrs: TokenStream = attrs.iter().cloned().collect();
    let stmts: TokenStream = stmts.iter().cloned().collect();
    let (items, stmts) = leading_items(stmts);
    // Hygienic, but located at the return type: rustc's "return type
    // inferred to be … here" then points at the signature, as its
    // "expected … because of return type" does without the attribute.
    let value = format_ident!(
        "__resilient_return",
        span = Span::mixed_site().located_at(ret.span())
    );
    let edge = quote_spanned! {ret.span()=>
        #[allow(
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::let_unit_value,
            clippy::unreachable,
            clippy::needless_return
        )]
        if false {
            let #value: #ret = ::core::unreachable!();
            return #value;
        }
    };
    let mut block = Group::new(
        Delimiter::Brace,
        quote! { #attrs #items #edge #(#destructures)* #stmts },
    );
    block.set_span(body.span());
    block
}

/// The items a body starts with (`use`, `fn`, `const`…), apart from the
/// rest of its statements: they go before the expansion's own statement,
/// where they were, first in the block (review 44: clippy's pedantic
/// `items_after_statements` fired on them). A body that does not start
/// with an item, or does not parse as statements, is left as it is.
fn leading_items(stmts: TokenStream) -> (TokenStream, TokenStream) {
    let starts_with_item = stmts
        .clone()
        .into_iter()
        .next()
        .is_some_and(|first| !matches!(&first, TokenTree::Ident(i) if i == "let"));
    if !starts_with_item {
        return (TokenStream::new(), stmts);
    }
    let Ok(block) = syn::parse2::<syn::Block>(quote!({ #stmts })) else {
        return (TokenStream::new(), stmts);
    };
    let count = block
        .stmts
        .iter()
        .take_while(|stmt| matches!(stmt, syn::Stmt::Item(_)))
        .count();
    if count == 0 {
        return (TokenStream::new(), stmts);
    }
    let (items, rest) = block.stmts.split_at(count);
    (quote!(#(#items)*), quote!(#(#rest)*))
}

/// The name each attempt's clone of a shared `self` (`self: Arc<Self>`) is
/// bound to, with the hygiene of the `self` it replaces: `self` itself
/// cannot be rebound, and an attempt cannot move the caller's.
fn self_copy(span: Span) -> syn::Ident {
    syn::Ident::new(SELF_COPY, span)
}

/// The backoff's first delay when `base_ms` is not given (100 ms; the
/// README's table of defaults says why).
pub(crate) const DEFAULT_BASE_MS: u64 = 100;
/// The backoff's largest delay when `cap_ms` is not given (30 s; ditto).
pub(crate) const DEFAULT_CAP_MS: u64 = 30_000;

const SELF_COPY: &str = "__resilient_self";

/// The body with its `self` renamed to [`self_copy`], so that each attempt
/// uses its own clone of a shared receiver, as `#[tracing::instrument]`
/// renames `self` for `#[async_trait]` methods; also `{self}` captured by
/// the format string of a formatting macro (`format!("{self}")`,
/// `write!(f, "{self:?}")`, `tracing::info!("{self}")`; see
/// [`FORMATTING_MACROS`]). Left alone: `self::` paths, `$self` in a nested
/// `macro_rules!`, and nested functions (from the `fn` to the end of their
/// body), whose `self` is their own.
fn rename_self(tokens: TokenStream) -> TokenStream {
    rename_self_in(tokens, None)
}

/// Macros whose format string is their first string literal (not after
/// `=` or `:`, as tracing's `target: "…"` and fields are) once the given
/// number of leading arguments has passed: `assert!`'s condition,
/// `assert_eq!`'s two operands. Under another macro, a `{self}` in a
/// string is left as it is: a compile error (the attempt cannot move the
/// caller's `self`), never a changed string. A macro of the user's own
/// with one of these names has its string treated as a format string too.
const FORMATTING_MACROS: &[(&str, usize)] = &[
    ("format", 0),
    ("format_args", 0),
    ("print", 0),
    ("println", 0),
    ("eprint", 0),
    ("eprintln", 0),
    ("write", 1),
    ("writeln", 1),
    ("panic", 0),
    ("assert", 1),
    ("debug_assert", 1),
    ("assert_eq", 2),
    ("assert_ne", 2),
    ("debug_assert_eq", 2),
    ("debug_assert_ne", 2),
    ("unreachable", 0),
    ("todo", 0),
    ("unimplemented", 0),
    ("trace", 0),
    ("debug", 0),
    ("info", 0),
    ("warn", 0),
    ("error", 0),
    ("event", 1),
    ("anyhow", 0),
    ("bail", 0),
    ("ensure", 1),
];

/// `formatting`: `tokens` are the arguments of a formatting macro whose
/// format string has not been seen yet, after that many more top-level
/// arguments.
fn rename_self_in(tokens: TokenStream, mut formatting: Option<usize>) -> TokenStream {
    let mut out: Vec<TokenTree> = Vec::new();
    let mut tokens = tokens.into_iter().peekable();
    while let Some(tt) = tokens.next() {
        match tt {
            // A nested function (`fn name`), whose `self` is its own; not
            // a function pointer type (`fn(u32) -> u32`).
            TokenTree::Ident(ident)
                if ident == "fn" && matches!(tokens.peek(), Some(TokenTree::Ident(_))) =>
            {
                out.push(TokenTree::Ident(ident));
                for tt in tokens.by_ref() {
                    let end = match &tt {
                        TokenTree::Group(g) => g.delimiter() == Delimiter::Brace,
                        TokenTree::Punct(p) => p.as_char() == ';',
                        _ => false,
                    };
                    out.push(tt);
                    if end {
                        break;
                    }
                }
            }
            TokenTree::Ident(ident) if ident == "self" => {
                let path = matches!(
                    tokens.peek(),
                    Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint
                );
                let metavariable =
                    matches!(out.last(), Some(TokenTree::Punct(p)) if p.as_char() == '$');
                out.push(TokenTree::Ident(if path || metavariable {
                    ident
                } else {
                    self_copy(ident.span())
                }));
            }
            // A `use` tree's group (`use std::fmt::{self, Write}`): paths
            // only, whose `self` is the module's (review 40: renamed). After
            // a path's `::`, not a single `:` (a labelled block, `'l: {…}`,
            // or a field's value, `Out { a: {…} }`, whose `self` is the
            // method's: left as it was, it was moved into every attempt).
            TokenTree::Group(g)
                if g.delimiter() == Delimiter::Brace
                    && matches!(&out[..], [.., TokenTree::Punct(a), TokenTree::Punct(b)]
                        if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':') =>
            {
                out.push(TokenTree::Group(g));
            }
            // A visibility, `pub(self)` or `pub(in self::…)`: a path, whose
            // `self` is the module's (review 44: renamed).
            TokenTree::Group(g)
                if g.delimiter() == Delimiter::Parenthesis
                    && matches!(out.last(), Some(TokenTree::Ident(i)) if i == "pub") =>
            {
                out.push(TokenTree::Group(g));
            }
            // `stringify!(…)`: its tokens are text, and a `self` there
            // reads "self", not the attempt's copy (review 40).
            TokenTree::Group(g)
                if matches!(&out[..], [.., TokenTree::Ident(name), TokenTree::Punct(bang)]
                    if bang.as_char() == '!' && name == "stringify") =>
            {
                out.push(TokenTree::Group(g));
            }
            TokenTree::Group(g) => {
                // `name!(…)`: a macro call, maybe of a formatting macro.
                let formats = match &out[..] {
                    [.., TokenTree::Ident(name), TokenTree::Punct(bang)]
                        if bang.as_char() == '!' =>
                    {
                        FORMATTING_MACROS
                            .iter()
                            .find(|(m, _)| name == m)
                            .map(|(_, before)| *before)
                    }
                    _ => None,
                };
                let mut renamed = Group::new(g.delimiter(), rename_self_in(g.stream(), formats));
                renamed.set_span(g.span());
                out.push(TokenTree::Group(renamed));
            }
            TokenTree::Punct(p) if p.as_char() == ',' && matches!(formatting, Some(n) if n > 0) => {
                formatting = formatting.map(|n| n - 1);
                out.push(TokenTree::Punct(p));
            }
            TokenTree::Literal(literal)
                if formatting == Some(0)
                    && is_string(&literal.to_string())
                    && !matches!(out.last(), Some(TokenTree::Punct(p)) if matches!(p.as_char(), '=' | ':')) =>
            {
                formatting = None;
                out.push(TokenTree::Literal(rename_self_in_format(literal)));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}

/// `"…"` or `r"…"`, `r#"…"#`: not a byte or C string, a number or a char.
fn is_string(literal: &str) -> bool {
    literal.starts_with('"') || literal.starts_with("r\"") || literal.starts_with("r#")
}

/// A string literal with its `{self}` and `{self:…}` arguments renamed, as
/// a format string would capture them (`{{self}}` is no argument).
fn rename_self_in_format(literal: proc_macro2::Literal) -> proc_macro2::Literal {
    let text = literal.to_string();
    if !text.contains("{self") {
        return literal;
    }
    let mut renamed = String::with_capacity(text.len() + 16);
    let mut rest = text.as_str();
    while let Some(at) = rest.find('{') {
        renamed.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("{{") {
            renamed.push_str("{{");
            rest = after;
        } else if let Some(after) = rest
            .strip_prefix("{self")
            .filter(|after| after.starts_with('}') || after.starts_with(':'))
        {
            renamed.push('{');
            renamed.push_str(SELF_COPY);
            rest = after;
        } else {
            renamed.push('{');
            rest = &rest[1..];
        }
    }
    renamed.push_str(rest);
    match renamed.parse::<proc_macro2::Literal>() {
        Ok(mut new) => {
            new.set_span(literal.span());
            new
        }
        Err(_) => literal,
    }
}
