//! See the docs of `Registry`, which carry this module's documentation
//! (the module is private; its items are re-exported at the crate root).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use crate::config::{ConfigError, Problem};
use crate::{
    AdaptiveThrottle, Breaker, BreakerConfig, BreakerEvent, BreakerSnapshot, BudgetConfig,
    BudgetSnapshot, Bulkhead, BulkheadConfig, BulkheadSnapshot, EventHub, RetryBudget,
    Subscription, ThrottleConfig, ThrottleSnapshot,
};

tokio::task_local! {
    static CURRENT: Registry;
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

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

/// Refused [`Registry::install`]: the global registry was already in use.
#[derive(Debug)]
pub struct AlreadyInstalled(());

impl fmt::Display for AlreadyInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the global resilience registry is already in use: install it at start-up, \
             before the first annotated call, and only once",
        )
    }
}

impl std::error::Error for AlreadyInstalled {}

impl Registry {
    /// Starts configuring a registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Makes this the global registry, used by every annotated call outside
    /// a [`scope`](Registry::scope). Call it once, at start-up, before the
    /// first annotated call.
    pub fn install(self) -> Result<(), AlreadyInstalled> {
        GLOBAL.set(self).map_err(|_| AlreadyInstalled(()))
    }

    /// The global registry: the installed one, or a default one.
    pub fn global() -> &'static Registry {
        GLOBAL.get_or_init(|| {
            RegistryBuilder::default()
                .build()
                .unwrap_or_else(|_| unreachable!("the default configuration is valid"))
        })
    }

    /// The registry annotated calls in this task use right now.
    pub fn current() -> Registry {
        CURRENT
            .try_with(Registry::clone)
            .unwrap_or_else(|_| Registry::global().clone())
    }

    pub(crate) fn scoped() -> Option<Registry> {
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

    pub(crate) fn count_fallback(&self, function: &'static str) {
        let mut map = self
            .inner
            .fallbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *map.entry(function).or_insert(0) += 1;
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
#[derive(Debug, Default)]
pub struct RegistryBuilder {
    strict: bool,
    default_breaker: Option<BreakerConfig>,
    default_budget: Option<BudgetConfig>,
    default_bulkhead: Option<BulkheadConfig>,
    breakers: BTreeMap<String, BreakerConfig>,
    budgets: BTreeMap<String, BudgetConfig>,
    bulkheads: BTreeMap<String, BulkheadConfig>,
    throttles: BTreeMap<String, ThrottleConfig>,
    problems: Vec<Problem>,
}

impl RegistryBuilder {
    /// Configures the breaker `name`.
    pub fn breaker(mut self, name: impl Into<String>, config: BreakerConfig) -> Self {
        self.breakers.insert(name.into(), config);
        self
    }

    /// Configures the retry budget `name`.
    pub fn budget(mut self, name: impl Into<String>, config: BudgetConfig) -> Self {
        self.budgets.insert(name.into(), config);
        self
    }

    /// Configures the bulkhead `name`.
    pub fn bulkhead(mut self, name: impl Into<String>, config: BulkheadConfig) -> Self {
        self.bulkheads.insert(name.into(), config);
        self
    }

    /// Turns on adaptive throttling for the dependency `name` (the breaker
    /// name its functions use).
    pub fn throttle(mut self, name: impl Into<String>, config: ThrottleConfig) -> Self {
        self.throttles.insert(name.into(), config);
        self
    }

    /// The configuration of breakers that were not configured by name.
    pub fn default_breaker(mut self, config: BreakerConfig) -> Self {
        self.default_breaker = Some(config);
        self
    }

    /// The configuration of retry budgets that were not configured by name.
    pub fn default_budget(mut self, config: BudgetConfig) -> Self {
        self.default_budget = Some(config);
        self
    }

    /// The configuration of bulkheads that were not configured by name.
    pub fn default_bulkhead(mut self, config: BulkheadConfig) -> Self {
        self.default_bulkhead = Some(config);
        self
    }

    /// With `true`, a function naming a breaker, budget or bulkhead that
    /// was not configured fails with [`ErrorKind::UnknownName`](crate::ErrorKind::UnknownName)
    /// instead of getting the default configuration.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Validates everything and builds the registry; every refused setting
    /// is reported, naming the part, the key and the value.
    pub fn build(self) -> Result<Registry, ConfigError> {
        let mut problems = self.problems;
        let default_breaker = self.default_breaker.unwrap_or_default();
        let default_budget = self.default_budget.unwrap_or_default();
        let default_bulkhead = self.default_bulkhead.unwrap_or_default();
        problems.extend(default_breaker.validate("(default)"));
        problems.extend(default_budget.validate("(default)"));
        problems.extend(default_bulkhead.validate("(default)"));
        for (name, c) in &self.breakers {
            problems.extend(c.validate(name));
        }
        for (name, c) in &self.budgets {
            problems.extend(c.validate(name));
        }
        for (name, c) in &self.bulkheads {
            problems.extend(c.validate(name));
        }
        for (name, c) in &self.throttles {
            problems.extend(c.validate(name));
        }
        ConfigError::from_problems(problems)?;

        let events = EventHub::new();
        let breakers = self
            .breakers
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                let b = Breaker::with_events(name.clone(), c, events.clone());
                (name, Arc::new(b))
            })
            .collect();
        let budgets = self
            .budgets
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                (name.clone(), Arc::new(RetryBudget::from_validated(name, c)))
            })
            .collect();
        let bulkheads = self
            .bulkheads
            .into_iter()
            .map(|(name, c)| {
                let name: Arc<str> = name.into();
                (name.clone(), Arc::new(Bulkhead::from_validated(name, c)))
            })
            .collect();
        let throttles = self
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
                strict: self.strict,
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

#[cfg(feature = "toml")]
mod file {
    //! Loading a registry from TOML; the format is documented on `Registry`.

    use std::path::Path;

    use super::RegistryBuilder;
    use crate::config::{ConfigError, Problem};
    use crate::{BreakerConfig, BudgetConfig, BulkheadConfig, ThrottleConfig};

    const SECTIONS: &str =
        "`registry`, `defaults`, `breakers`, `budgets`, `bulkheads`, `throttles`";

    fn problem(
        section: &'static str,
        name: Option<&str>,
        key: &str,
        value: impl std::fmt::Display,
        reason: impl Into<String>,
    ) -> Problem {
        Problem::new(section, name, key, value, reason)
    }

    /// Reads one `[kind.name]` table with the part's own `from_toml`, so
    /// every problem names the part, the key and the value.
    fn part<T>(
        table: toml::Value,
        from_toml: impl FnOnce(&str) -> Result<T, ConfigError>,
        problems: &mut Vec<Problem>,
    ) -> Option<T> {
        let text = match table {
            toml::Value::Table(t) => toml::to_string(&t).unwrap_or_default(),
            other => {
                problems.push(problem(
                    "registry",
                    None,
                    "(entry)",
                    other,
                    "expected a table of settings",
                ));
                return None;
            }
        };
        match from_toml(&text) {
            Ok(c) => Some(c),
            Err(e) => {
                problems.extend(e.problems().iter().cloned());
                None
            }
        }
    }

    impl RegistryBuilder {
        /// Adds the configuration in a TOML document (see the module docs of
        /// [`Registry`](super::Registry) for the format). Settings given in
        /// code before or after are kept; the file wins for a name both give.
        /// Problems are reported by [`build`](RegistryBuilder::build), all at
        /// once, or here if the text is not TOML.
        pub fn toml(mut self, text: &str) -> Result<Self, ConfigError> {
            let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                ConfigError::one(problem(
                    "registry",
                    None,
                    "(file)",
                    "…",
                    e.message().trim().to_owned(),
                ))
            })?;
            let mut problems = Vec::new();
            for (section, value) in doc {
                let table = match value {
                    toml::Value::Table(t) => t,
                    other => {
                        problems.push(problem(
                            "registry",
                            None,
                            &section,
                            other,
                            format!("expected a table; the file's sections are {SECTIONS}"),
                        ));
                        continue;
                    }
                };
                match section.as_str() {
                    "registry" => {
                        for (key, value) in table {
                            match (key.as_str(), value.as_str()) {
                                ("unknown_names", Some("error")) => self.strict = true,
                                ("unknown_names", Some("default")) => self.strict = false,
                                ("unknown_names", _) => problems.push(problem("registry", None, &key, value, "expected \"default\" (unconfigured names get the default configuration) or \"error\" (they are refused)")),
                                _ => problems.push(problem("registry", None, &key, value, "unknown key; the `[registry]` section accepts `unknown_names`")),
                            }
                        }
                    }
                    "defaults" => {
                        for (kind, value) in table {
                            match kind.as_str() {
                                "breaker" => self.default_breaker = part(value, |t| BreakerConfig::from_toml("(default)", t), &mut problems),
                                "budget" => self.default_budget = part(value, |t| BudgetConfig::from_toml("(default)", t), &mut problems),
                                "bulkhead" => self.default_bulkhead = part(value, |t| BulkheadConfig::from_toml("(default)", t), &mut problems),
                                _ => problems.push(problem("registry", None, &format!("defaults.{kind}"), "…", "unknown section; `[defaults]` accepts `breaker`, `budget`, `bulkhead`")),
                            }
                        }
                    }
                    "breakers" | "budgets" | "bulkheads" | "throttles" => {
                        for (name, value) in table {
                            match section.as_str() {
                                "breakers" => {
                                    if let Some(c) = part(
                                        value,
                                        |t| BreakerConfig::from_toml(&name, t),
                                        &mut problems,
                                    ) {
                                        self.breakers.insert(name, c);
                                    }
                                }
                                "budgets" => {
                                    if let Some(c) = part(
                                        value,
                                        |t| BudgetConfig::from_toml(&name, t),
                                        &mut problems,
                                    ) {
                                        self.budgets.insert(name, c);
                                    }
                                }
                                "bulkheads" => {
                                    if let Some(c) = part(
                                        value,
                                        |t| BulkheadConfig::from_toml(&name, t),
                                        &mut problems,
                                    ) {
                                        self.bulkheads.insert(name, c);
                                    }
                                }
                                _ => {
                                    if let Some(c) = part(
                                        value,
                                        |t| ThrottleConfig::from_toml(&name, t),
                                        &mut problems,
                                    ) {
                                        self.throttles.insert(name, c);
                                    }
                                }
                            }
                        }
                    }
                    _ => problems.push(problem(
                        "registry",
                        None,
                        &section,
                        "…",
                        format!("unknown section; expected one of {SECTIONS}"),
                    )),
                }
            }
            self.problems.extend(problems);
            Ok(self)
        }

        /// Like [`toml`](RegistryBuilder::toml), reading the document from a file.
        pub fn toml_file(self, path: impl AsRef<Path>) -> Result<Self, ConfigError> {
            let path = path.as_ref();
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::one(problem(
                    "registry",
                    None,
                    "(file)",
                    path.display(),
                    format!("cannot read it: {e}"),
                ))
            })?;
            self.toml(&text)
        }
    }
}
