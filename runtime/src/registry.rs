//! See the docs of `Registry`, which carry this module's documentation
//! (the module is private; its items are re-exported at the crate root).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use crate::config::{ConfigError, Problem, check_name};
use crate::{
    AdaptiveThrottle, Breaker, BreakerConfig, BreakerEvent, BreakerSnapshot, BudgetConfig,
    BudgetSnapshot, Bulkhead, BulkheadConfig, BulkheadSnapshot, EventHub, RetryBudget,
    Subscription, ThrottleConfig, ThrottleSnapshot,
};

tokio::task_local! {
    static CURRENT: Registry;
}

/// Set once any registry has been scoped around a task: until then no task
/// has one, and a call skips the look for it (a task-local access, about a
/// fifth of the cost of finding a breaker). Set before the scope's future
/// exists, so every poll of it, on any thread, comes after the store.
static EVER_SCOPED: AtomicBool = AtomicBool::new(false);

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// Fallbacks served outside any scope before a global registry existed:
/// counted here rather than by making the default registry (which would
/// refuse a later [`Registry::install`] for a function that names no
/// parts), and passed to the global registry once there is one.
static EARLY_FALLBACKS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Named breakers, budgets, throttles and bulkheads. Cheap to clone (a
/// reference count); all clones are the same registry.
///
/// ```
/// use std::time::Duration;
/// use resilient::{BreakerConfig, BulkheadConfig, Registry, SlidingWindow};
///
/// let registry = Registry::builder()
///     .breaker(
///         "payments",
///         BreakerConfig::default()
///             .sliding_window(SlidingWindow::CountBased { size: 20 })
///             .minimum_number_of_calls(10)
///             .wait_duration_in_open_state(Duration::from_secs(30)),
///     )
///     .bulkhead("payments", BulkheadConfig::default().max_concurrent(8))
///     .strict(true)
///     .build()
///     .unwrap();
/// assert!(registry.breaker("payments").is_some());
/// ```
#[derive(Clone)]
#[doc = include_str!("docs/registry.md")]
///
pub struct Registry {
    inner: Arc<Inner>,
}

/// The name of a part a call site gives (its breaker's, budget's or
/// bulkhead's).
type NameOf = fn(&Site) -> Option<&'static str>;

/// Those of `names` that no annotated function gives as the name `named`
/// reads from its site, in their order; none where the list of annotated
/// functions is not available (without the `linkme` feature).
fn unnamed<'a>(names: impl Iterator<Item = &'a str>, named: NameOf) -> Vec<&'a str> {
    let sites = sites();
    if sites.is_empty() {
        return Vec::new();
    }
    names
        .filter(|&name| !sites.iter().any(|site| named(site) == Some(name)))
        .collect()
}

struct Inner {
    strict: bool,
    default_breaker: BreakerConfig,
    default_budget: BudgetConfig,
    default_bulkhead: BulkheadConfig,
    breakers: RwLock<HashMap<Arc<str>, Arc<Breaker>>>,
    budgets: RwLock<HashMap<Arc<str>, Arc<RetryBudget>>>,
    bulkheads: RwLock<HashMap<Arc<str>, Arc<Bulkhead>>>,
    throttles: HashMap<Arc<str>, Arc<AdaptiveThrottle>>,
    fallbacks: Mutex<BTreeMap<&'static str, u64>>,
    events: Arc<EventHub>,
    /// The names configured at build time (the maps above also gain the
    /// names a lenient registry created on first use).
    configured: Configured,
}

#[derive(Default)]
struct Configured {
    breakers: BTreeSet<String>,
    budgets: BTreeSet<String>,
    bulkheads: BTreeSet<String>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn names<T>(m: &RwLock<HashMap<Arc<str>, T>>) -> Vec<String> {
            let mut v: Vec<String> = read(m).keys().map(|k| k.to_string()).collect();
            v.sort();
            v
        }
        f.debug_struct("Registry")
            .field("strict", &self.inner.strict)
            .field("breakers", &names(&self.inner.breakers))
            .field("budgets", &names(&self.inner.budgets))
            .field("bulkheads", &names(&self.inner.bulkheads))
            .finish_non_exhaustive()
    }
}

/// A lock poisoned by a panicking subscriber still guards consistent data:
/// every critical section here is a single map insert or read.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// The global registry was already in use when another was installed.
///
/// No longer returned: [`Registry::install`] now refuses with a
/// [`ConfigError`], which also lists the names a strict registry lacks.
/// Its `Display` is the problem's reason.
#[deprecated(
    since = "0.1.0",
    note = "never returned: `Registry::install` refuses with a `ConfigError` instead"
)]
#[derive(Debug)]
pub struct AlreadyInstalled(());

/// Why a registry cannot be installed twice: the reason of the problem
/// [`Registry::install`] refuses with.
const ALREADY_INSTALLED: &str = "the global resilience registry is already in use: \
    install it at start-up, before the first annotated call, and only once";

#[allow(deprecated)]
impl fmt::Display for AlreadyInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(ALREADY_INSTALLED)
    }
}

#[allow(deprecated)]
impl std::error::Error for AlreadyInstalled {}

impl Registry {
    /// Starts configuring a registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Makes this the global registry, used by every annotated call outside
    /// a [`scope`](Registry::scope). Call it once, at start-up, before the
    /// first annotated call.
    ///
    /// A [strict](RegistryBuilder::strict) registry is checked first with
    /// [`check_names`](Registry::check_names): if an annotated function in
    /// this program names a breaker, budget or bulkhead it lacks, it is
    /// refused here, listing every such name and the functions that use it,
    /// rather than failing those functions' calls later.
    ///
    /// Refused too, with the same error type, when the global registry is
    /// already in use (installed before, or created by an earlier call of
    /// an annotated function that names a breaker, budget or bulkhead; one
    /// that names none does not create it): configuration must not depend
    /// on which call came first.
    ///
    /// With the `tracing` feature, a lenient registry logs at INFO the
    /// names it lacks (they get the defaults: see
    /// [`check_names`](Registry::check_names)), and any registry logs at
    /// WARN what it configures that no annotated function names: throttles
    /// that guard no breaker, and the breakers, budgets and bulkheads of
    /// [`unused_parts`](Registry::unused_parts) (often a misspelt name).
    pub fn install(self) -> Result<(), ConfigError> {
        if self.inner.strict {
            self.check_names()?;
        }
        #[cfg(feature = "tracing")]
        if !self.inner.strict {
            if let Err(unconfigured) = self.check_names() {
                // One line: the error's `Display` opens with "invalid
                // configuration", which a lenient registry's is not.
                let listed: Vec<String> = unconfigured
                    .problems()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                tracing::info!(
                    "resilient: names with no configuration get the defaults: {}",
                    listed.join("; ")
                );
            }
        }
        #[cfg(feature = "tracing")]
        {
            let unused = self.unused_throttles();
            if !unused.is_empty() {
                tracing::warn!(
                    "resilient: throttles that guard no annotated call (no function names them as its breaker): {}",
                    unused.join(", ")
                );
            }
            let unused = self.unused_parts();
            if !unused.is_empty() {
                let listed: Vec<String> = unused
                    .iter()
                    .map(|(kind, name)| format!("{kind} `{name}`"))
                    .collect();
                tracing::warn!(
                    "resilient: configured, but named by no annotated function (a misspelt name configures nothing; parts used only by hand are listed too): {}",
                    listed.join(", ")
                );
            }
        }
        GLOBAL.set(self).map_err(|_| {
            ConfigError::one(Problem::new("registry", None, "", "", ALREADY_INSTALLED))
        })?;
        take_early_fallbacks();
        Ok(())
    }

    /// Checks that every breaker, budget and bulkhead named by an annotated
    /// function in this program is configured in this registry, and reports
    /// every one that is not, with the functions (and their source lines)
    /// that name it.
    ///
    /// [`install`](Registry::install) runs it on a strict registry. Run it
    /// yourself on a registry you [`scope`](Registry::scope) (in tests), or
    /// on a lenient one to list the names that would get the default
    /// configuration. A budget is only checked where a function names it
    /// with `budget = "…"`: one that comes with a breaker's name is the
    /// default budget when not configured, even in a strict registry.
    ///
    /// The attribute records each function's names in a list the linker
    /// assembles (with the `linkme` feature, on by default); the list covers
    /// every annotated function linked into the program, whether or not it
    /// is ever called. Without the feature, or on a platform `linkme` does
    /// not support, the list is empty and this check passes: a strict
    /// registry then refuses an unconfigured name at the function's first
    /// call instead.
    ///
    /// ```standalone_crate
    /// use resilient::{BreakerConfig, Registry, resilient};
    ///
    /// #[resilient(breaker = "fraud-checks")]
    /// async fn score(order: u64) -> Result<u32, std::io::Error> { Ok(7) }
    ///
    /// let lacking = Registry::builder().strict(true).build().unwrap();
    /// # #[cfg(feature = "linkme")] {
    /// let err = lacking.check_names().unwrap_err();
    /// assert!(err.to_string().contains("breaker `fraud-checks`"), "{err}");
    /// assert!(err.to_string().contains("score"), "{err}");
    /// # }
    ///
    /// let complete = Registry::builder()
    ///     .breaker("fraud-checks", BreakerConfig::default())
    ///     .strict(true)
    ///     .build()
    ///     .unwrap();
    /// assert!(complete.check_names().is_ok());
    /// ```
    pub fn check_names(&self) -> Result<(), ConfigError> {
        let configured = &self.inner.configured;
        let mut missing: BTreeMap<(&'static str, &'static str), Vec<&'static Site>> =
            BTreeMap::new();
        for site in sites() {
            for (section, name, set) in [
                ("breaker", site.breaker, &configured.breakers),
                ("budget", site.budget, &configured.budgets),
                ("bulkhead", site.bulkhead, &configured.bulkheads),
            ] {
                if let Some(name) = name {
                    if !set.contains(name) {
                        missing.entry((section, name)).or_default().push(site);
                    }
                }
            }
        }
        let problems = missing
            .into_iter()
            .map(|((section, name), mut users)| {
                users.sort_by_key(|s| (s.function, s.file, s.line));
                users.dedup_by_key(|s| (s.function, s.file, s.line));
                let users: Vec<String> = users
                    .iter()
                    .map(|s| format!("`{}` ({}:{})", s.function, s.file, s.line))
                    .collect();
                let (table, set) = match section {
                    "breaker" => ("breakers", &configured.breakers),
                    "budget" => ("budgets", &configured.budgets),
                    _ => ("bulkheads", &configured.bulkheads),
                };
                // A configured name a letter or two off: one of the two is
                // misspelt (a file's `[breakers.paymnets]`).
                #[cfg(feature = "serde")]
                let near = {
                    let names: Vec<&str> = set.iter().map(String::as_str).collect();
                    let misspelt = |other| {
                        format!(
                            "; `[{table}.{}]` is configured: is one of the two names misspelt?",
                            key_path(other)
                        )
                    };
                    crate::config::nearest(name, &names).map_or_else(String::new, misspelt)
                };
                #[cfg(not(feature = "serde"))]
                let near = {
                    let _ = set;
                    ""
                };
                Problem::part(
                    section,
                    name,
                    format!(
                        "not configured, but used by {} (`{section} = \"{name}\"`){near}; configure it (`[{table}.{}]` in the file, or `.{section}(\"{name}\", …)` in code), or correct the name in the attribute",
                        users.join(", "),
                        key_path(name),
                    ),
                )
            })
            .collect();
        ConfigError::from_problems(problems)
    }

    /// The configured throttles that no annotated function in this program
    /// names as its breaker, by name. A throttle guards the calls of the
    /// breaker with its name (and nothing else names it), so one listed
    /// here guards no annotated call: a misspelt name, a dependency this
    /// program does not call (a configuration file shared by services), or
    /// one used by hand through [`throttle`](Registry::throttle).
    /// [`install`](Registry::install) logs them as a warning (with the
    /// `tracing` feature); assert on them in a start-up test to refuse
    /// them. Empty where the list of annotated functions is not available
    /// (without the `linkme` feature), as for [`check_names`](Registry::check_names).
    ///
    /// ```standalone_crate
    /// use resilient::{BreakerConfig, Registry, ThrottleConfig, resilient};
    ///
    /// #[resilient(breaker = "payments")]
    /// async fn charge() -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let registry = Registry::builder()
    ///     .breaker("payments", BreakerConfig::default())
    ///     .throttle("paymnets", ThrottleConfig::default())
    ///     .build()
    ///     .unwrap();
    /// # #[cfg(feature = "linkme")]
    /// assert_eq!(registry.unused_throttles(), ["paymnets"]);
    /// ```
    pub fn unused_throttles(&self) -> Vec<&str> {
        let mut unused = unnamed(self.inner.throttles.keys().map(|name| &**name), |s| {
            s.breaker
        });
        unused.sort_unstable();
        unused
    }

    /// The breakers, budgets and bulkheads configured in this registry that
    /// no annotated function in this program names, as `(kind, name)`
    /// (`kind` is `"breaker"`, `"budget"` or `"bulkhead"`), sorted. A
    /// misspelt name in a configuration file configures a part no call
    /// uses, while the function it was meant for runs with the defaults
    /// (or is refused by a strict registry, for the name it does use):
    /// [`install`](Registry::install) logs these as a warning (with the
    /// `tracing` feature). A part used only by hand
    /// ([`breaker`](Registry::breaker) and the like) is listed too. Empty
    /// where the list of annotated functions is not available (without
    /// the `linkme` feature), as for [`check_names`](Registry::check_names).
    ///
    /// ```standalone_crate
    /// use resilient::{BreakerConfig, Registry, resilient};
    ///
    /// #[resilient(breaker = "payments")]
    /// async fn charge() -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let registry = Registry::builder()
    ///     .breaker("paymnets", BreakerConfig::default())
    ///     .build()
    ///     .unwrap();
    /// # #[cfg(feature = "linkme")]
    /// assert_eq!(registry.unused_parts(), [("breaker", "paymnets")]);
    /// ```
    pub fn unused_parts(&self) -> Vec<(&'static str, &str)> {
        let configured = &self.inner.configured;
        let kinds: [(&str, &BTreeSet<String>, NameOf); 3] = [
            ("breaker", &configured.breakers, |s| s.breaker),
            ("budget", &configured.budgets, |s| s.budget),
            ("bulkhead", &configured.bulkheads, |s| s.bulkhead),
        ];
        kinds
            .into_iter()
            .flat_map(|(kind, names, named)| {
                let names = names.iter().map(String::as_str);
                unnamed(names, named)
                    .into_iter()
                    .map(move |name| (kind, name))
            })
            .collect()
    }

    /// The global registry: the installed one, or a default one.
    pub fn global() -> &'static Registry {
        let mut made = false;
        let global = GLOBAL.get_or_init(|| {
            made = true;
            RegistryBuilder::default()
                .build()
                .unwrap_or_else(|_| unreachable!("the default configuration is valid"))
        });
        if made {
            take_early_fallbacks();
        }
        global
    }

    /// The registry annotated calls in this task use right now.
    pub fn current() -> Registry {
        CURRENT
            .try_with(Registry::clone)
            .unwrap_or_else(|_| Registry::global().clone())
    }

    /// No registry was ever scoped around a task: every call uses the
    /// global one (one relaxed load).
    #[inline(always)]
    pub(crate) fn never_scoped() -> bool {
        !EVER_SCOPED.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn scoped() -> Option<Registry> {
        if Registry::never_scoped() {
            return None;
        }
        CURRENT.try_with(Registry::clone).ok()
    }

    /// Runs `fut` with this registry as the one its annotated calls use.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use resilient::Registry;
    ///
    /// let mine = Registry::builder().build().unwrap();
    /// mine.scope(async {
    ///     assert!(Registry::current().same_as(&mine));
    /// })
    /// .await;
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> + use<F> {
        EVER_SCOPED.store(true, Ordering::Relaxed);
        CURRENT.scope(self.clone(), fut)
    }

    /// `true` when both are the same registry.
    pub fn same_as(&self, other: &Registry) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Does this registry refuse names that were not configured?
    pub fn is_strict(&self) -> bool {
        self.inner.strict
    }

    /// The breaker with this name, if it was configured or has been used.
    pub fn breaker(&self, name: &str) -> Option<Arc<Breaker>> {
        read(&self.inner.breakers).get(name).cloned()
    }

    /// The retry budget with this name, if it was configured or has been used.
    pub fn budget(&self, name: &str) -> Option<Arc<RetryBudget>> {
        read(&self.inner.budgets).get(name).cloned()
    }

    /// The bulkhead with this name, if it was configured or has been used.
    pub fn bulkhead(&self, name: &str) -> Option<Arc<Bulkhead>> {
        read(&self.inner.bulkheads).get(name).cloned()
    }

    /// The adaptive throttle of this dependency, if one was configured.
    pub fn throttle(&self, name: &str) -> Option<Arc<AdaptiveThrottle>> {
        self.inner.throttles.get(name).cloned()
    }

    /// Calls `f` with every event of every breaker of this registry, until
    /// the returned [`Subscription`] is dropped.
    pub fn subscribe(&self, f: impl Fn(&BreakerEvent) + Send + Sync + 'static) -> Subscription {
        self.inner.events.subscribe(f)
    }

    /// The state of every part, as plain data for readiness endpoints and
    /// dashboards (serializable with the `serde` feature).
    pub fn snapshot(&self) -> RegistrySnapshot {
        fn sorted<T, S>(m: &RwLock<HashMap<Arc<str>, Arc<T>>>, f: impl Fn(&T) -> S) -> Vec<S> {
            let map = read(m);
            let mut names: Vec<&Arc<str>> = map.keys().collect();
            names.sort();
            names.into_iter().map(|n| f(&map[n])).collect()
        }
        let mut throttles: Vec<_> = self.inner.throttles.iter().collect();
        throttles.sort_by(|a, b| a.0.cmp(b.0));
        let fallbacks = self
            .inner
            .fallbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(function, served)| FallbackSnapshot {
                function: (*function).to_owned(),
                served: *served,
            })
            .collect();
        RegistrySnapshot {
            breakers: sorted(&self.inner.breakers, Breaker::snapshot),
            budgets: sorted(&self.inner.budgets, RetryBudget::snapshot),
            bulkheads: sorted(&self.inner.bulkheads, Bulkhead::snapshot),
            throttles: throttles.into_iter().map(|(_, t)| t.snapshot()).collect(),
            fallbacks,
        }
    }

    fn get_or_create<T>(
        &self,
        map: &RwLock<HashMap<Arc<str>, Arc<T>>>,
        name: &'static str,
        strict: bool,
        create: impl FnOnce(Arc<str>) -> T,
    ) -> Result<Arc<T>, crate::Error> {
        if let Some(found) = read(map).get(name) {
            return Ok(found.clone());
        }
        if strict {
            return Err(crate::Error::unknown_name(Arc::from(name)));
        }
        let mut map = write(map);
        let entry = map
            .entry(Arc::from(name))
            .or_insert_with_key(|key| Arc::new(create(key.clone())));
        Ok(entry.clone())
    }

    pub(crate) fn resolve_breaker(&self, name: &'static str) -> Result<Arc<Breaker>, crate::Error> {
        let inner = &self.inner;
        self.get_or_create(&inner.breakers, name, inner.strict, |n| {
            Breaker::with_events(n, inner.default_breaker.clone(), inner.events.clone())
        })
    }

    /// `explicit`: the function named this budget (`budget = "…"`), rather
    /// than using its breaker's; only explicit names are refused by a strict
    /// registry, since an unconfigured implicit budget is the default one.
    pub(crate) fn resolve_budget(
        &self,
        name: &'static str,
        explicit: bool,
    ) -> Result<Arc<RetryBudget>, crate::Error> {
        let inner = &self.inner;
        self.get_or_create(&inner.budgets, name, explicit && inner.strict, |n| {
            RetryBudget::from_validated(n, inner.default_budget.clone())
        })
    }

    pub(crate) fn resolve_bulkhead(
        &self,
        name: &'static str,
    ) -> Result<Arc<Bulkhead>, crate::Error> {
        let inner = &self.inner;
        self.get_or_create(&inner.bulkheads, name, inner.strict, |n| {
            Bulkhead::from_validated(n, inner.default_bulkhead.clone())
        })
    }

    /// Counts a fallback served in the registry the call used: the
    /// scoped one, or the global one, which this does not make (see
    /// [`EARLY_FALLBACKS`]).
    pub(crate) fn count_fallback_served(function: &'static str) {
        if let Some(scoped) = Registry::scoped() {
            return scoped.count_fallback(function);
        }
        if let Some(global) = GLOBAL.get() {
            return global.count_fallback(function);
        }
        let mut early = EARLY_FALLBACKS
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Checked again under the lock that passes early counts on: a
        // global registry set meanwhile has taken them, or will take this.
        match GLOBAL.get() {
            Some(global) => global.count_fallback(function),
            None => early.push(function),
        }
    }

    pub(crate) fn count_fallback(&self, function: &'static str) {
        let mut map = self
            .inner
            .fallbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *map.entry(function).or_insert(0) += 1;
    }
}

/// Passes the fallbacks counted before there was a global registry to it,
/// once it is set.
fn take_early_fallbacks() {
    let Some(global) = GLOBAL.get() else {
        return;
    };
    let early = std::mem::take(
        &mut *EARLY_FALLBACKS
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for function in early {
        global.count_fallback(function);
    }
}

/// The state of every part of a [`Registry`]. See [`Registry::snapshot`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RegistrySnapshot {
    /// Every breaker, by name.
    pub breakers: Vec<BreakerSnapshot>,
    /// Every retry budget, by name.
    pub budgets: Vec<BudgetSnapshot>,
    /// Every bulkhead, by name.
    pub bulkheads: Vec<BulkheadSnapshot>,
    /// Every adaptive throttle, by name.
    pub throttles: Vec<ThrottleSnapshot>,
    /// How often each function with a `fallback` served its fallback.
    pub fallbacks: Vec<FallbackSnapshot>,
}

/// How often one function served its fallback: each one is a caller given a
/// degraded answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FallbackSnapshot {
    /// The function's path, e.g. `my_crate::quotes::fetch`.
    pub function: String,
    /// Calls answered by the fallback.
    pub served: u64,
}

/// Configures a [`Registry`]; [`build`](RegistryBuilder::build) validates
/// everything at once and reports every problem.
///
/// Settings come from two layers: code (the builder's methods) gives
/// defaults, and configuration files (`toml` and `toml_file`, feature
/// `toml`) override them, whatever the
/// order of the calls. For a name both give, the file's configuration is
/// used, whole: keys the file leaves out take the library's defaults, not
/// the code's, so what runs is what the operator's file says. The same
/// holds for `[defaults.*]` against `default_breaker` and friends, and for
/// `[registry] unknown_names` against [`strict`](RegistryBuilder::strict).
/// Between two files, the later one wins. A setting made in code is
/// validated all the same: an invalid one is refused even where a file
/// overrides it, since it is a mistake in the code.
#[derive(Debug, Default)]
pub struct RegistryBuilder {
    code: Layer,
    file: Layer,
    problems: Vec<Problem>,
}

/// The settings of one source, code or file.
#[derive(Debug, Default)]
struct Layer {
    strict: Option<bool>,
    default_breaker: Option<BreakerConfig>,
    default_budget: Option<BudgetConfig>,
    default_bulkhead: Option<BulkheadConfig>,
    breakers: BTreeMap<String, BreakerConfig>,
    budgets: BTreeMap<String, BudgetConfig>,
    bulkheads: BTreeMap<String, BulkheadConfig>,
    throttles: BTreeMap<String, ThrottleConfig>,
}

impl Layer {
    /// `self`, with every setting `over` gives replacing its own.
    fn overridden_by(mut self, over: Layer) -> Layer {
        self.strict = over.strict.or(self.strict);
        self.default_breaker = over.default_breaker.or(self.default_breaker);
        self.default_budget = over.default_budget.or(self.default_budget);
        self.default_bulkhead = over.default_bulkhead.or(self.default_bulkhead);
        self.breakers.extend(over.breakers);
        self.budgets.extend(over.budgets);
        self.bulkheads.extend(over.bulkheads);
        self.throttles.extend(over.throttles);
        self
    }
}

/// A part configured twice in code: one of the two would be dropped
/// without a word, so neither is taken.
fn configured_twice(section: &'static str, name: &str) -> Problem {
    Problem::part(
        section,
        name,
        "configured twice in code: keep one of the two calls (a configuration file, not a second call, is how to override code)",
    )
}

impl RegistryBuilder {
    /// Reports a part configured twice in code, once however many times.
    fn twice(&mut self, section: &'static str, name: &str) {
        let problem = configured_twice(section, name);
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }

    /// Configures the breaker `name`, unless a configuration file does.
    /// Configuring the same name twice in code is refused by
    /// [`build`](Self::build).
    pub fn breaker(mut self, name: impl Into<String>, config: BreakerConfig) -> Self {
        let name = name.into();
        if self.code.breakers.contains_key(&name) {
            self.twice("breaker", &name);
        }
        self.code.breakers.insert(name, config);
        self
    }

    /// Configures the retry budget `name`, unless a configuration file does.
    pub fn budget(mut self, name: impl Into<String>, config: BudgetConfig) -> Self {
        let name = name.into();
        if self.code.budgets.contains_key(&name) {
            self.twice("budget", &name);
        }
        self.code.budgets.insert(name, config);
        self
    }

    /// Configures the bulkhead `name`, unless a configuration file does.
    pub fn bulkhead(mut self, name: impl Into<String>, config: BulkheadConfig) -> Self {
        let name = name.into();
        if self.code.bulkheads.contains_key(&name) {
            self.twice("bulkhead", &name);
        }
        self.code.bulkheads.insert(name, config);
        self
    }

    /// Turns on adaptive throttling for the dependency `name` (the breaker
    /// name its functions use), unless a configuration file configures it.
    pub fn throttle(mut self, name: impl Into<String>, config: ThrottleConfig) -> Self {
        let name = name.into();
        if self.code.throttles.contains_key(&name) {
            self.twice("throttle", &name);
        }
        self.code.throttles.insert(name, config);
        self
    }

    /// The configuration of breakers that were not configured by name
    /// (a file's `[defaults.breaker]` overrides it).
    pub fn default_breaker(mut self, config: BreakerConfig) -> Self {
        self.code.default_breaker = Some(config);
        self
    }

    /// The configuration of retry budgets that were not configured by name
    /// (a file's `[defaults.budget]` overrides it).
    pub fn default_budget(mut self, config: BudgetConfig) -> Self {
        self.code.default_budget = Some(config);
        self
    }

    /// The configuration of bulkheads that were not configured by name
    /// (a file's `[defaults.bulkhead]` overrides it).
    pub fn default_bulkhead(mut self, config: BulkheadConfig) -> Self {
        self.code.default_bulkhead = Some(config);
        self
    }

    /// With `true`, a function naming a breaker, budget or bulkhead that
    /// was not configured fails with [`ErrorKind::UnknownName`](crate::ErrorKind::UnknownName)
    /// instead of getting the default configuration, and
    /// [`install`](Registry::install) refuses the registry if any annotated
    /// function in the program names one (see [`Registry::check_names`]).
    /// A file's `[registry] unknown_names` overrides it.
    pub fn strict(mut self, strict: bool) -> Self {
        self.code.strict = Some(strict);
        self
    }

    /// Validates everything and builds the registry; every refused setting
    /// is reported, naming the part, the key and the value (and, for
    /// settings from a file, the file, line and table).
    pub fn build(self) -> Result<Registry, ConfigError> {
        let mut problems = self.problems;
        // Every setting made in code is validated, also one a file
        // overrides: a mistake in code stays one, and must not wait to be
        // found until the file's table is removed. A file's settings were
        // validated, and its names checked, as it was read; refused, they
        // never reach its layer.
        let code = &self.code;
        if let Some(c) = &code.default_breaker {
            problems.extend(c.validate("(default)"));
        }
        if let Some(c) = &code.default_budget {
            problems.extend(c.validate("(default)"));
        }
        if let Some(c) = &code.default_bulkhead {
            problems.extend(c.validate("(default)"));
        }
        let mut named = |section: &'static str, name: &str| {
            if let Err(reason) = check_name(name) {
                problems.push(Problem::part(section, name, reason));
            }
        };
        for name in code.breakers.keys() {
            named("breaker", name);
        }
        for name in code.budgets.keys() {
            named("budget", name);
        }
        for name in code.bulkheads.keys() {
            named("bulkhead", name);
        }
        for name in code.throttles.keys() {
            named("throttle", name);
        }
        for (name, c) in &code.breakers {
            problems.extend(c.validate(name));
        }
        for (name, c) in &code.budgets {
            problems.extend(c.validate(name));
        }
        for (name, c) in &code.bulkheads {
            problems.extend(c.validate(name));
        }
        for (name, c) in &code.throttles {
            problems.extend(c.validate(name));
        }
        let layer = self.code.overridden_by(self.file);
        let strict = layer.strict.unwrap_or(false);
        let default_breaker = layer.default_breaker.unwrap_or_default();
        let default_budget = layer.default_budget.unwrap_or_default();
        let default_bulkhead = layer.default_bulkhead.unwrap_or_default();
        ConfigError::from_problems(problems)?;

        let configured = Configured {
            breakers: layer.breakers.keys().cloned().collect(),
            budgets: layer.budgets.keys().cloned().collect(),
            bulkheads: layer.bulkheads.keys().cloned().collect(),
        };
        let events = EventHub::new();
        let breakers = layer
            .breakers
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                let b = Breaker::with_events(name.clone(), c, events.clone());
                (name, Arc::new(b))
            })
            .collect();
        let budgets = layer
            .budgets
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                (name.clone(), Arc::new(RetryBudget::from_validated(name, c)))
            })
            .collect();
        let bulkheads = layer
            .bulkheads
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                (name.clone(), Arc::new(Bulkhead::from_validated(name, c)))
            })
            .collect();
        let throttles = layer
            .throttles
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                (
                    name.clone(),
                    Arc::new(AdaptiveThrottle::from_validated(name, c)),
                )
            })
            .collect();
        Ok(Registry {
            inner: Arc::new(Inner {
                strict,
                configured,
                default_breaker,
                default_budget,
                default_bulkhead,
                breakers: RwLock::new(breakers),
                budgets: RwLock::new(budgets),
                bulkheads: RwLock::new(bulkheads),
                throttles,
                fallbacks: Mutex::new(BTreeMap::new()),
                events,
            }),
        })
    }
}

/// One annotated function's names, recorded by the attribute's expansion
/// (through [`__resilient_site!`](crate::__resilient_site)) so that
/// [`Registry::check_names`] knows every name the program uses before any
/// call.
#[doc(hidden)]
#[derive(Debug)]
pub struct Site {
    function: &'static str,
    file: &'static str,
    line: u32,
    breaker: Option<&'static str>,
    budget: Option<&'static str>,
    bulkhead: Option<&'static str>,
}

impl Site {
    /// Called by the expansion only.
    pub const fn new(
        function: &'static str,
        file: &'static str,
        line: u32,
        breaker: Option<&'static str>,
        budget: Option<&'static str>,
        bulkhead: Option<&'static str>,
    ) -> Self {
        Site {
            function,
            file,
            line,
            breaker,
            budget,
            bulkhead,
        }
    }
}

/// Every annotated function's names, assembled by the linker from the
/// statics the expansion emits: no code runs before `main`, and no unsafe
/// code is needed in the user's crate (it builds under
/// `#![forbid(unsafe_code)]`; `tests/ui/pass/forbid-unsafe-code.rs`).
#[cfg(feature = "linkme")]
#[linkme::distributed_slice]
#[linkme(crate = linkme)]
pub static SITES: [Site];

fn sites() -> &'static [Site] {
    #[cfg(feature = "linkme")]
    {
        &SITES
    }
    #[cfg(not(feature = "linkme"))]
    {
        &[]
    }
}

/// Records one annotated function's names for [`Registry::check_names`].
/// Emitted by `#[resilient]`; not an API.
#[cfg(feature = "linkme")]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilient_site {
    ($site:expr) => {
        #[$crate::__private::linkme::distributed_slice($crate::__private::SITES)]
        #[linkme(crate = $crate::__private::linkme)]
        static __RESILIENT_SITE: $crate::__private::Site = $site;
    };
}

/// Without the `linkme` feature, names are not recorded.
#[cfg(not(feature = "linkme"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilient_site {
    ($site:expr) => {};
}

/// A TOML key as written in a table path: bare when it can be, else
/// quoted (a name with a `.` is `[breakers."fraud.checks"]`).
fn key_path(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

#[cfg(feature = "toml")]
mod file {
    //! Loading a registry from TOML; the format is documented on `Registry`.
    //! Every refusal is placed: file (when read from one), line, column and
    //! table.

    use std::path::Path;
    use std::sync::Arc;

    use toml::Spanned;
    use toml::de::{DeTable, DeValue};

    use super::{RegistryBuilder, key_path};
    use crate::config::setting::{self, RawValue, Settings};
    use crate::config::{ConfigError, Location, Problem, check_name, did_you_mean};
    use crate::{BreakerConfig, BudgetConfig, BulkheadConfig, ThrottleConfig};

    /// The parts `[defaults]` gives defaults for.
    const DEFAULT_KINDS: &[&str] = &["breaker", "budget", "bulkhead"];
    const SECTION_NAMES: &[&str] = &[
        "registry",
        "defaults",
        "breakers",
        "budgets",
        "bulkheads",
        "throttles",
    ];

    /// The text being read, for turning spans into lines.
    struct Source<'a> {
        text: &'a str,
        file: Option<Arc<str>>,
    }

    impl Source<'_> {
        fn at(&self, offset: usize, table: Option<&str>) -> Location {
            let mut location = Location::at(self.text, offset, self.file.as_ref());
            location.table = table.map(str::to_owned);
            location
        }
    }

    /// A problem for the parser's "duplicate key" at `span`, naming what
    /// was written twice: a key (with its table, its part and the value of
    /// the repeat) or a table header; `None` for any other error.
    fn written_twice(
        src: &Source<'_>,
        message: &str,
        span: Option<std::ops::Range<usize>>,
    ) -> Option<Problem> {
        if message.trim() != "duplicate key" {
            return None;
        }
        let span = span?;
        let text = src.text;
        let key = text.get(span.clone())?.trim().trim_matches('"');
        let line_start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
        let line_end = text
            .get(span.start..)?
            .find('\n')
            .map_or(text.len(), |i| span.start + i);
        let line = text.get(line_start..line_end)?;
        if line.trim_start().starts_with('[') {
            let header = line.trim();
            return Some(
                Problem::of_file(format!(
                    "the table `{header}` is written more than once; write each table once"
                ))
                .at(src.at(span.start, None)),
            );
        }
        // The table the key is in: the last header above it.
        let table = text
            .get(..line_start)?
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| l.starts_with('['))
            .map(|h| {
                h.trim_matches(|c| c == '[' || c == ']')
                    .split('.')
                    .map(|part| part.trim().trim_matches('"'))
                    .collect::<Vec<_>>()
                    .join(".")
            });
        let value = setting::value_after_key(text, span.end);
        let part = table.as_deref().and_then(|t| t.split_once('.'));
        let (section, name) =
            match part.and_then(|(section, name)| Some((part_kind(section)?, name))) {
                Some((kind, name)) => (kind, Some(name)),
                None => ("registry", None),
            };
        Some(
            Problem::new(
                section,
                name,
                key,
                value,
                "set more than once in this table; write each key once",
            )
            .at(src.at(span.start, table.as_deref())),
        )
    }

    /// The kind of part a section of the file holds (`breakers` holds
    /// `breaker`s); `None` for the sections that hold no parts.
    fn part_kind(section: &str) -> Option<&'static str> {
        match section {
            "breakers" => Some("breaker"),
            "budgets" => Some("budget"),
            "bulkheads" => Some("bulkhead"),
            "throttles" => Some("throttle"),
            _ => None,
        }
    }

    /// What a value is, for "found …" in messages.
    fn shown(value: &DeValue<'_>) -> String {
        RawValue::from(value).to_string()
    }

    /// Reads one part's table (`[breakers.payments]`), placing every
    /// problem at its key.
    fn part<T: Settings>(
        src: &Source<'_>,
        parent: &str,
        table_path: &str,
        (name, name_at): (&str, usize),
        value: &Spanned<DeValue<'_>>,
        problems: &mut Vec<Problem>,
    ) -> Option<T> {
        let here = src.at(value.span().start, Some(table_path));
        let DeValue::Table(table) = value.get_ref() else {
            let here = src.at(name_at, Some(parent));
            problems.push(
                Problem::new(
                    T::SECTION,
                    Some(name),
                    "",
                    "",
                    format!(
                        "expected a table of settings, found {} ({}); write `[{table_path}]` followed by its keys, one per line",
                        RawValue::from(value.get_ref()).kind(),
                        shown(value.get_ref()),
                    ),
                )
                .at(here),
            );
            return None;
        };
        let mut entries: Vec<(String, RawValue, Location)> = Vec::new();
        for (key, value) in table {
            let at = src.at(key.span().start, Some(table_path));
            // No setting is a table: `[breakers.fraud.checks]` is breaker
            // `fraud` with a key `checks`, where `fraud.checks` was meant
            // as one name, which TOML wants quoted.
            if matches!(value.get_ref(), DeValue::Table(_)) && parent != "defaults" {
                let dotted = format!("{name}.{}", key.get_ref());
                problems.push(
                    Problem::new(
                        T::SECTION,
                        Some(name),
                        key.get_ref().as_ref(),
                        shown(value.get_ref()),
                        format!(
                            "not a setting but a table; if `{dotted}` is one name, quote it, as a name with a `.` must be in TOML: `[{parent}.{}]`",
                            key_path(&dotted)
                        ),
                    )
                    .at(at),
                );
                continue;
            }
            entries.push((
                key.get_ref().to_string(),
                RawValue::from(value.get_ref()),
                at,
            ));
        }
        match setting::from_located_entries(name, &entries, &here) {
            Ok(config) => Some(config),
            Err(found) => {
                // Each value as the file writes it.
                problems.extend(setting::as_written(found, table, src.text));
                None
            }
        }
    }

    impl RegistryBuilder {
        /// Adds the configuration in a TOML document (see the docs of
        /// [`Registry`](super::Registry) for the format). The file
        /// overrides code: for a name both configure, the file's settings
        /// are used, whether this is called before or after the builder's
        /// other methods (see [`RegistryBuilder`]). With several
        /// documents, a part that two of them configure gets the later
        /// one's table as a whole (its settings are not merged key by key).
        ///
        /// Problems are reported by [`build`](RegistryBuilder::build), all
        /// at once, or here if the text is not TOML; each names the line,
        /// column, table, part and key it concerns.
        pub fn toml(self, text: &str) -> Result<Self, ConfigError> {
            self.read_toml(text, None)
        }

        /// Like [`toml`](RegistryBuilder::toml), reading the document from
        /// a file; problems also name the file.
        pub fn toml_file(self, path: impl AsRef<Path>) -> Result<Self, ConfigError> {
            let path = path.as_ref();
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::one(Problem::of_file(format!(
                    "cannot read `{}`: {e}",
                    path.display()
                )))
            })?;
            self.read_toml(&text, Some(Arc::from(path.display().to_string())))
        }

        fn read_toml(mut self, text: &str, file: Option<Arc<str>>) -> Result<Self, ConfigError> {
            let src = Source { text, file };
            let (doc, errors) = DeTable::parse_recoverable(text);
            // A key or table written twice is named, and the rest of the
            // file, which parsed, is still checked (the first of the two
            // is kept there), so that its other problems come in the same
            // report. Any other error stops here: what follows it may not
            // be what the file meant.
            let mut problems = Vec::new();
            let mut stops = false;
            for e in &errors {
                problems.push(match written_twice(&src, e.message(), e.span()) {
                    Some(twice) => twice,
                    None => {
                        stops = true;
                        let p = Problem::of_file(format!("not valid TOML: {}", e.message().trim()));
                        match e.span() {
                            Some(span) => p.at(src.at(span.start, None)),
                            None => p,
                        }
                    }
                });
            }
            if stops {
                problems.sort_by_key(|p| p.line().unwrap_or(0));
                return Err(ConfigError::from_problems(problems)
                    .err()
                    .unwrap_or_else(|| unreachable!("at least one error")));
            }
            for (section, value) in doc.get_ref() {
                let section_name = section.get_ref().as_ref();
                let DeValue::Table(table) = value.get_ref() else {
                    // A key outside any table: the one of `[registry]`, or
                    // the builder's `strict` written as a key, go there;
                    // a section's name is one written without its brackets.
                    let reason = match section_name {
                        "unknown_names" => {
                            "a key outside any table; it belongs in `[registry]`: write `[registry]` on the line above".to_owned()
                        }
                        "strict" => {
                            "a key outside any table; a strict registry is written `unknown_names = \"error\"` under `[registry]`".to_owned()
                        }
                        "registry" => "expected a table: write `[registry]` followed by its keys, one per line".to_owned(),
                        "defaults" => "expected a table: write `[defaults.breaker]` (or `.budget`, `.bulkhead`) followed by its keys, one per line".to_owned(),
                        _ if SECTION_NAMES.contains(&section_name) => format!(
                            "expected a table: write `[{section_name}.NAME]`, NAME the part's, followed by its keys, one per line"
                        ),
                        _ => format!(
                            "a key outside any table; {}the file's settings go in its tables: {}",
                            did_you_mean(section_name, SECTION_NAMES),
                            crate::config::list(SECTION_NAMES)
                        ),
                    };
                    problems.push(
                        Problem::new(
                            "registry",
                            None,
                            section_name,
                            shown(value.get_ref()),
                            reason,
                        )
                        .at(src.at(section.span().start, None)),
                    );
                    continue;
                };
                match section_name {
                    "registry" => self.registry_section(&src, table, &mut problems),
                    "defaults" => self.defaults_section(&src, table, &mut problems),
                    "breakers" | "budgets" | "bulkheads" | "throttles" => {
                        self.parts_section(&src, section_name, table, &mut problems);
                    }
                    _ => problems.push(
                        Problem::of_file(format!(
                            "unknown section `[{}]`; {}expected one of {}",
                            key_path(section_name),
                            did_you_mean(section_name, SECTION_NAMES),
                            crate::config::list(SECTION_NAMES)
                        ))
                        .at(src.at(section.span().start, None)),
                    ),
                }
            }
            // In the file's order, as an operator reads it.
            problems.sort_by_key(|p| p.line().unwrap_or(0));
            self.problems.extend(problems);
            Ok(self)
        }

        fn registry_section(
            &mut self,
            src: &Source<'_>,
            table: &DeTable<'_>,
            problems: &mut Vec<Problem>,
        ) {
            for (key, value) in table {
                let at = src.at(key.span().start, Some("registry"));
                match (key.get_ref().as_ref(), value.get_ref().as_str()) {
                    ("unknown_names", Some("error")) => self.file.strict = Some(true),
                    ("unknown_names", Some("default")) => self.file.strict = Some(false),
                    ("unknown_names", _) => problems.push(Problem::new("registry", None, "unknown_names", shown(value.get_ref()), "expected \"default\" (unconfigured names get the default configuration) or \"error\" (they are refused, and `install` checks every name the program uses)").at(at)),
                    (other, _) => problems.push(Problem::new("registry", None, other, shown(value.get_ref()), format!("unknown key; {}the `[registry]` section accepts `unknown_names`", did_you_mean(other, &["unknown_names"]))).at(at)),
                }
            }
        }

        fn defaults_section(
            &mut self,
            src: &Source<'_>,
            table: &DeTable<'_>,
            problems: &mut Vec<Problem>,
        ) {
            for (kind, value) in table {
                let kind_name = kind.get_ref().as_ref();
                let path = format!("defaults.{}", key_path(kind_name));
                let at = ("(default)", kind.span().start);
                match kind_name {
                    "breaker" => {
                        if let Some(c) =
                            part::<BreakerConfig>(src, "defaults", &path, at, value, problems)
                        {
                            self.file.default_breaker = Some(c);
                        }
                    }
                    "budget" => {
                        if let Some(c) =
                            part::<BudgetConfig>(src, "defaults", &path, at, value, problems)
                        {
                            self.file.default_budget = Some(c);
                        }
                    }
                    "bulkhead" => {
                        if let Some(c) =
                            part::<BulkheadConfig>(src, "defaults", &path, at, value, problems)
                        {
                            self.file.default_bulkhead = Some(c);
                        }
                    }
                    _ => problems.push(
                        Problem::of_file(format!(
                            "unknown section `[{path}]`; {}`[defaults]` accepts {}",
                            did_you_mean(kind_name, DEFAULT_KINDS),
                            crate::config::list(DEFAULT_KINDS)
                        ))
                        .at(src.at(kind.span().start, Some("defaults"))),
                    ),
                }
            }
        }

        fn parts_section(
            &mut self,
            src: &Source<'_>,
            section: &str,
            table: &DeTable<'_>,
            problems: &mut Vec<Problem>,
        ) {
            for (name, value) in table {
                let name_str = name.get_ref().as_ref();
                let path = format!("{section}.{}", key_path(name_str));
                let Some(kind) = part_kind(section) else {
                    unreachable!("read only for the parts' sections");
                };
                if let Err(reason) = check_name(name_str) {
                    problems.push(
                        Problem::part(kind, name_str, reason)
                            .at(src.at(name.span().start, Some(section))),
                    );
                    continue;
                }
                let name_owned = name_str.to_owned();
                let at = (name_str, name.span().start);
                match section {
                    "breakers" => {
                        if let Some(c) =
                            part::<BreakerConfig>(src, section, &path, at, value, problems)
                        {
                            self.file.breakers.insert(name_owned, c);
                        }
                    }
                    "budgets" => {
                        if let Some(c) =
                            part::<BudgetConfig>(src, section, &path, at, value, problems)
                        {
                            self.file.budgets.insert(name_owned, c);
                        }
                    }
                    "bulkheads" => {
                        if let Some(c) =
                            part::<BulkheadConfig>(src, section, &path, at, value, problems)
                        {
                            self.file.bulkheads.insert(name_owned, c);
                        }
                    }
                    _ => {
                        if let Some(c) =
                            part::<ThrottleConfig>(src, section, &path, at, value, problems)
                        {
                            self.file.throttles.insert(name_owned, c);
                        }
                    }
                }
            }
        }
    }
}
