//! Parsing `#[resilient(...)]`'s arguments. Only syntax here: what each key
//! may hold. Rules across keys and the function live in `valid.rs`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Ident, LitInt, LitStr, Path, Token};

pub(crate) const KEYS: &str = "`retries`, `idempotent`, `deadline_ms`, `timeout_ms`, `backoff`, `base_ms`, `cap_ms`, `breaker`, `budget`, `bulkhead`, `fallback`, `classify`, `crate`";

pub(crate) const STRATEGIES: [&str; 4] = [
    "full_jitter",
    "equal_jitter",
    "decorrelated_jitter",
    "exponential",
];

/// A value and the span of the `key = value` it came from.
#[derive(Clone)]
pub(crate) struct Spanned2<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

#[derive(Default)]
pub(crate) struct Args {
    pub(crate) retries: Option<Spanned2<u32>>,
    pub(crate) idempotent: Option<Span>,
    pub(crate) deadline_ms: Option<Spanned2<u64>>,
    pub(crate) timeout_ms: Option<Spanned2<u64>>,
    pub(crate) backoff: Option<Spanned2<&'static str>>,
    pub(crate) base_ms: Option<Spanned2<u64>>,
    pub(crate) cap_ms: Option<Spanned2<u64>>,
    pub(crate) breaker: Option<Spanned2<LitStr>>,
    pub(crate) budget: Option<Spanned2<LitStr>>,
    pub(crate) bulkhead: Option<Spanned2<LitStr>>,
    pub(crate) fallback: Option<Spanned2<Path>>,
    pub(crate) classify: Option<Spanned2<Path>>,
    pub(crate) krate: Option<Spanned2<Path>>,
}

/// Collects errors so the user sees all of them at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        let e = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub(crate) fn push_error(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors = Errors::default();
        while !input.is_empty() {
            let key = Ident::parse_any(input)?;
            let name = key.to_string();
            if let Err(e) = args.parse_value(&key, &name, input) {
                errors.push_error(e);
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        errors.finish()?;
        Ok(args)
    }
}

fn set<T>(slot: &mut Option<Spanned2<T>>, key: &Ident, value: T, span: Span) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            key.span(),
            format!("`{key}` is set more than once; keep one"),
        ));
    }
    *slot = Some(Spanned2 { value, span });
    Ok(())
}

fn int<T: std::str::FromStr>(lit: &LitInt, key: &str) -> syn::Result<T>
where
    T::Err: std::fmt::Display,
{
    lit.base10_parse::<T>()
        .map_err(|e| syn::Error::new(lit.span(), format!("`{key}` takes a whole number: {e}")))
}

impl Args {
    fn parse_value(&mut self, key: &Ident, name: &str, input: ParseStream<'_>) -> syn::Result<()> {
        // Flags first: they take no value.
        if name == "idempotent" {
            if input.peek(Token![=]) {
                return Err(syn::Error::new(
                    key.span(),
                    "`idempotent` is a flag and takes no value: write `idempotent`",
                ));
            }
            if self.idempotent.is_some() {
                return Err(syn::Error::new(
                    key.span(),
                    "`idempotent` is set more than once; keep one",
                ));
            }
            self.idempotent = Some(key.span());
            return Ok(());
        }
        let expects = match name {
            "retries" | "deadline_ms" | "timeout_ms" | "base_ms" | "cap_ms" => "a whole number",
            "backoff" => {
                "a string: \"full_jitter\", \"equal_jitter\", \"decorrelated_jitter\" or \"exponential\""
            }
            "breaker" | "budget" | "bulkhead" => "a name as a string, like `\"payments\"`",
            "fallback" | "classify" => "a path to a function",
            "crate" => "a path as a string, like `\"::resilient\"`",
            _ => {
                return Err(syn::Error::new(
                    key.span(),
                    format!("unknown `#[resilient]` argument `{name}`; expected one of: {KEYS}"),
                ));
            }
        };
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("`{name}` needs a value: `{name} = ...` with {expects}"),
            ));
        }
        input.parse::<Token![=]>()?;
        let wrong = |span: Span| syn::Error::new(span, format!("`{name}` takes {expects}"));
        match name {
            "retries" | "deadline_ms" | "timeout_ms" | "base_ms" | "cap_ms" => {
                let lit: LitInt = input.parse().map_err(|e| wrong(e.span()))?;
                let span = key.span().join(lit.span()).unwrap_or(key.span());
                match name {
                    "retries" => set(&mut self.retries, key, int::<u32>(&lit, name)?, span),
                    "deadline_ms" => set(&mut self.deadline_ms, key, int(&lit, name)?, span),
                    "timeout_ms" => set(&mut self.timeout_ms, key, int(&lit, name)?, span),
                    "base_ms" => set(&mut self.base_ms, key, int(&lit, name)?, span),
                    _ => set(&mut self.cap_ms, key, int(&lit, name)?, span),
                }
            }
            "backoff" => {
                let lit: LitStr = input.parse().map_err(|e| wrong(e.span()))?;
                let text = lit.value();
                let Some(strategy) = STRATEGIES.into_iter().find(|s| *s == text) else {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "unknown backoff `{text}`; expected one of: \"full_jitter\" (the default), \"equal_jitter\", \"decorrelated_jitter\", \"exponential\""
                        ),
                    ));
                };
                set(&mut self.backoff, key, strategy, lit.span())
            }
            "breaker" | "budget" | "bulkhead" => {
                let lit: LitStr = input.parse().map_err(|e| wrong(e.span()))?;
                let text = lit.value();
                if text.is_empty()
                    || !text
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
                {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "`{name}` names must be non-empty and use only ASCII letters, digits, `_`, `-` and `.`, as in a config file key"
                        ),
                    ));
                }
                let span = lit.span();
                match name {
                    "breaker" => set(&mut self.breaker, key, lit, span),
                    "budget" => set(&mut self.budget, key, lit, span),
                    _ => set(&mut self.bulkhead, key, lit, span),
                }
            }
            "fallback" | "classify" => {
                let path: Path = input.parse().map_err(|e| wrong(e.span()))?;
                let span = path.span();
                if name == "fallback" {
                    set(&mut self.fallback, key, path, span)
                } else {
                    set(&mut self.classify, key, path, span)
                }
            }
            _ => {
                let lit: LitStr = input.parse().map_err(|e| wrong(e.span()))?;
                let path: Path = lit.parse().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`crate` takes a path as a string, like `\"::resilient\"`",
                    )
                })?;
                set(&mut self.krate, key, path, lit.span())
            }
        }
    }
}
