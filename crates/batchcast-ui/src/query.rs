//! Request inputs, checked and bounded before anything is read.

use batchcast_store::RunId;
use batchcast_store::XAxis;

use crate::error::UiError;
use crate::guard::form_pairs;

/// Longest query string accepted.
const MAX_QUERY: usize = 8 * 1024;
/// Runs in one chart, at most.
pub(crate) const MAX_RUNS: usize = 50;
/// Metrics in one chart, at most (one axis each).
pub(crate) const MAX_KEYS: usize = 2;
/// Longest metric name or search text accepted.
pub(crate) const MAX_TEXT: usize = 200;

/// A request's decoded query string.
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

fn bad(msg: impl Into<String>) -> UiError {
    UiError::BadRequest(msg.into())
}

/// A row id from a path segment.
pub(crate) fn parse_id(what: &str, s: &str) -> Result<i64, UiError> {
    s.parse::<i64>().ok().filter(|&n| n > 0).ok_or_else(|| {
        bad(format!(
            "{what} id must be a positive integer, not {:?}",
            clip(s)
        ))
    })
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

impl Query {
    pub(crate) fn parse(raw: Option<&str>) -> Result<Query, UiError> {
        let raw = raw.unwrap_or("");
        if raw.len() > MAX_QUERY {
            return Err(bad(format!("query string longer than {MAX_QUERY} bytes")));
        }
        Ok(Query {
            pairs: form_pairs(raw),
        })
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A free text (search) field, trimmed; `None` when empty.
    pub(crate) fn text(&self, key: &str) -> Result<Option<String>, UiError> {
        match self.get(key).map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) if s.chars().count() > MAX_TEXT || s.chars().any(char::is_control) => Err(bad(
                format!("{key} must be at most {MAX_TEXT} printable characters"),
            )),
            Some(s) => Ok(Some(s.to_string())),
        }
    }

    /// `runs=1,2,3` (and `run=ID`, repeated, as checkboxes send them): at
    /// least one, at most [`MAX_RUNS`], no repeats.
    pub(crate) fn run_ids(&self) -> Result<Vec<RunId>, UiError> {
        let parts: Vec<&str> = self
            .pairs
            .iter()
            .filter(|(k, _)| k == "runs" || k == "run")
            .flat_map(|(_, v)| v.split(','))
            .filter(|p| !p.is_empty())
            .collect();
        if !self.pairs.iter().any(|(k, _)| k == "runs" || k == "run") {
            return Err(bad("missing runs=ID,ID,… (the runs to read)"));
        }
        let mut ids = Vec::new();
        for part in parts {
            let id = parse_id("run", part)?;
            if !ids.contains(&id) {
                if ids.len() == MAX_RUNS {
                    return Err(bad(format!("at most {MAX_RUNS} runs at once")));
                }
                ids.push(id);
            }
        }
        if ids.is_empty() {
            return Err(bad("runs= names no run"));
        }
        Ok(ids)
    }

    /// Every `key=` (metric names), 1 to [`MAX_KEYS`], each printable and
    /// short. Whether the store holds them is checked by the caller.
    pub(crate) fn metric_keys(&self) -> Result<Vec<String>, UiError> {
        let keys: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, _)| k == "key")
            .map(|(_, v)| v.clone())
            .collect();
        if keys.is_empty() || keys.len() > MAX_KEYS {
            return Err(bad(format!("give 1 to {MAX_KEYS} metrics as key=NAME")));
        }
        for k in &keys {
            if k.is_empty() || k.len() > MAX_TEXT || k.chars().any(char::is_control) {
                return Err(bad(format!("bad metric name {:?}", clip(k))));
            }
        }
        Ok(keys)
    }

    /// `x=elapsed` (default) or `x=step`.
    pub(crate) fn x_axis(&self) -> Result<XAxis, UiError> {
        match self.get("x") {
            None | Some("elapsed") => Ok(XAxis::Elapsed),
            Some("step") => Ok(XAxis::Step),
            Some(other) => Err(bad(format!(
                "x must be elapsed or step, not {:?}",
                clip(other)
            ))),
        }
    }

    /// `after=TS_MS`: only points newer than this (live updates).
    pub(crate) fn after(&self) -> Result<Option<i64>, UiError> {
        self.get("after")
            .map(|s| {
                s.parse::<i64>()
                    .map_err(|_| bad(format!("after must be milliseconds, not {:?}", clip(s))))
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_lists_are_bounded_and_checked() {
        let q = Query::parse(Some("runs=3,1,3")).unwrap();
        assert_eq!(q.run_ids().unwrap(), vec![3, 1]);
        let q = Query::parse(Some("run=4&run=2&runs=4,5")).unwrap();
        assert_eq!(q.run_ids().unwrap(), vec![4, 2, 5]);
        for bad in ["runs=", "runs=a", "runs=-1", "runs=1;2", "x=1"] {
            assert!(Query::parse(Some(bad)).unwrap().run_ids().is_err(), "{bad}");
        }
        let many = (1..=51)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(Query::parse(Some(&format!("runs={many}")))
            .unwrap()
            .run_ids()
            .is_err());
    }

    #[test]
    fn keys_axis_and_text() {
        let q = Query::parse(Some("key=proc%2Fcpu_percent&key=b&x=step&q=%20lr%20")).unwrap();
        assert_eq!(q.metric_keys().unwrap(), vec!["proc/cpu_percent", "b"]);
        assert_eq!(q.x_axis().unwrap(), XAxis::Step);
        assert_eq!(q.text("q").unwrap().as_deref(), Some("lr"));
        let q = Query::parse(Some("key=a&key=b&key=c&x=time")).unwrap();
        assert!(q.metric_keys().is_err());
        assert!(q.x_axis().is_err());
        assert!(Query::parse(Some(&"a".repeat(MAX_QUERY + 1))).is_err());
    }
}
