//! Device names: `CUDA_VISIBLE_DEVICES` as CUDA reads it, and the names a
//! user gives (`cuda:N`, `N`, `cuda`, a UUID or a unique prefix of one).
//!
//! Every input is cut to a bounded length before it is looked at.

use crate::backend::DeviceInfo;
use crate::error::{Error, Result};

/// Longest `CUDA_VISIBLE_DEVICES` or device list read, in bytes; past it
/// the rest is ignored (a list) or refused (a name).
pub const MAX_SPEC_LEN: usize = 4096;
/// Most entries read from one list.
pub const MAX_ENTRIES: usize = 64;
/// Longest single device name, in bytes.
const MAX_NAME: usize = 128;

/// The devices `CUDA_VISIBLE_DEVICES` = `spec` leaves visible out of
/// `physical` (all of them, in order, with their physical ordinals), with
/// their ordinals renumbered from 0 in the order listed.
///
/// As CUDA reads it: unset (`None`) is every device; empty is none; each
/// comma-separated entry is an ordinal, a `GPU-` UUID or a unique prefix
/// of one, or a `MIG-` UUID (prefix); reading stops at the first entry that
/// names no device, names one twice or is ambiguous.
pub fn visible(spec: Option<&str>, physical: &[DeviceInfo]) -> Vec<DeviceInfo> {
    let Some(spec) = spec else {
        return physical
            .iter()
            .enumerate()
            .map(|(i, d)| renumbered(d, i))
            .collect();
    };
    let spec = &spec.as_bytes()[..spec.len().min(MAX_SPEC_LEN)];
    let mut out: Vec<DeviceInfo> = Vec::new();
    for entry in spec.split(|&b| b == b',').take(MAX_ENTRIES) {
        let Ok(entry) = std::str::from_utf8(entry) else {
            break;
        };
        let entry = entry.trim();
        let found = if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            by_uuid_prefix(entry, physical).ok()
        } else {
            entry
                .parse::<u32>()
                .ok()
                .and_then(|i| physical.get(i as usize))
        };
        match found {
            Some(d) if !out.iter().any(|o| o.uuid == d.uuid) => {
                let ordinal = out.len();
                out.push(renumbered(d, ordinal));
            }
            _ => break,
        }
    }
    out
}

fn renumbered(d: &DeviceInfo, ordinal: usize) -> DeviceInfo {
    DeviceInfo {
        ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
        ..d.clone()
    }
}

/// A device as a user names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `cuda:N`, `N` or `cuda` (0): an ordinal in the naming process.
    Ordinal(u32),
    /// A UUID (`GPU-…` / `MIG-…`), in full or a unique prefix.
    Uuid(String),
}

impl DeviceSpec {
    /// Parses one name.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason| Error::BadSpec {
            spec: cut(spec),
            reason,
        };
        if spec.len() > MAX_NAME {
            return Err(bad("too long"));
        }
        let spec = spec.trim();
        if spec.starts_with("GPU-") || spec.starts_with("MIG-") {
            if spec.len() == 4 {
                return Err(bad(
                    "a UUID prefix needs at least one character after the dash",
                ));
            }
            return Ok(DeviceSpec::Uuid(spec.to_string()));
        }
        if spec == "cuda" {
            return Ok(DeviceSpec::Ordinal(0));
        }
        let n = spec.strip_prefix("cuda:").unwrap_or(spec);
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("not an ordinal or a UUID"));
        }
        n.parse()
            .map(DeviceSpec::Ordinal)
            .map_err(|_| bad("ordinal out of range"))
    }
}

/// The device `spec` names among `devices` (those visible, by ordinal).
pub fn resolve(spec: &str, devices: &[DeviceInfo]) -> Result<DeviceInfo> {
    let found = match DeviceSpec::parse(spec)? {
        DeviceSpec::Ordinal(n) => devices.iter().find(|d| d.ordinal == n),
        DeviceSpec::Uuid(u) => by_uuid_prefix(&u, devices).ok(),
    };
    found.cloned().ok_or_else(|| unknown(spec, devices))
}

/// The device with UUID `uuid` exactly among `devices`.
pub(crate) fn by_uuid(uuid: &str, devices: &[DeviceInfo]) -> Result<DeviceInfo> {
    devices
        .iter()
        .find(|d| d.uuid == uuid)
        .cloned()
        .ok_or_else(|| unknown(uuid, devices))
}

/// The one device whose UUID is or starts with `prefix`; `Err(n)` with the
/// number of matches otherwise.
fn by_uuid_prefix<'a>(prefix: &str, devices: &'a [DeviceInfo]) -> Result<&'a DeviceInfo, usize> {
    if let Some(d) = devices.iter().find(|d| d.uuid == prefix) {
        return Ok(d);
    }
    let mut matches = devices.iter().filter(|d| d.uuid.starts_with(prefix));
    match (matches.next(), matches.count()) {
        (Some(d), 0) => Ok(d),
        (first, rest) => Err(rest + usize::from(first.is_some())),
    }
}

fn unknown(wanted: &str, devices: &[DeviceInfo]) -> Error {
    let visible = if devices.is_empty() {
        "none".to_string()
    } else {
        devices
            .iter()
            .map(|d| format!("cuda:{}={}", d.ordinal, d.uuid))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Error::UnknownDevice {
        wanted: cut(wanted),
        visible,
    }
}

fn cut(s: &str) -> String {
    s.chars().take(MAX_NAME).collect()
}

/// Parses `serve --device`'s list, `cuda:0,cuda:1` (names as
/// [`DeviceSpec::parse`] reads them); an empty entry, a repeated name or
/// more than [`batchcast::MAX_MIRRORS`] names is an error.
pub fn parse_device_list(list: &str) -> Result<Vec<DeviceSpec>> {
    let bad = |reason| Error::BadSpec {
        spec: cut(list),
        reason,
    };
    if list.len() > MAX_SPEC_LEN {
        return Err(bad("the list is too long"));
    }
    let mut out = Vec::new();
    for entry in list.split(',') {
        if out.len() == batchcast::MAX_MIRRORS {
            return Err(bad(
                "more devices than one producer serves (batchcast::MAX_MIRRORS)",
            ));
        }
        if entry.trim().is_empty() {
            return Err(bad("an empty entry"));
        }
        let spec = DeviceSpec::parse(entry)?;
        if out.contains(&spec) {
            return Err(bad("a device named twice"));
        }
        out.push(spec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gpus(n: u32) -> Vec<DeviceInfo> {
        (0..n)
            .map(|i| DeviceInfo {
                ordinal: i,
                uuid: format!("GPU-{i}a{i}b0000-0000-0000-0000-00000000000{i}"),
                name: "test".into(),
                mig: false,
                shareable: true,
            })
            .collect()
    }

    fn uuids(v: &[DeviceInfo]) -> Vec<(u32, &str)> {
        v.iter().map(|d| (d.ordinal, &d.uuid[..6])).collect()
    }

    #[test]
    fn unset_is_all_and_empty_is_none() {
        assert_eq!(visible(None, &gpus(3)).len(), 3);
        assert!(visible(Some(""), &gpus(3)).is_empty());
    }

    #[test]
    fn ordinals_are_renumbered_in_the_order_listed() {
        assert_eq!(
            uuids(&visible(Some("2,0"), &gpus(3))),
            [(0, "GPU-2a"), (1, "GPU-0a")]
        );
    }

    #[test]
    fn reading_stops_at_the_first_invalid_entry() {
        assert_eq!(uuids(&visible(Some("1,7,0"), &gpus(3))), [(0, "GPU-1a")]);
        assert_eq!(uuids(&visible(Some("0,x,1"), &gpus(3))), [(0, "GPU-0a")]);
        assert_eq!(uuids(&visible(Some("0,0,1"), &gpus(3))), [(0, "GPU-0a")]);
        assert!(visible(Some("-1"), &gpus(3)).is_empty());
    }

    #[test]
    fn uuids_in_full_or_by_unique_prefix() {
        let all = gpus(3);
        assert_eq!(
            uuids(&visible(Some("GPU-2a2b,GPU-0"), &all)),
            [(0, "GPU-2a"), (1, "GPU-0a")]
        );
        assert!(visible(Some("GPU-"), &all).is_empty(), "ambiguous prefix");
        assert_eq!(visible(Some(&all[1].uuid), &all)[0].uuid, all[1].uuid);
        assert!(visible(Some("MIG-1"), &all).is_empty());
    }

    #[test]
    fn resolves_names() {
        let v = visible(Some("2,1"), &gpus(3));
        assert_eq!(resolve("cuda:1", &v).unwrap().uuid, gpus(3)[1].uuid);
        assert_eq!(resolve("cuda", &v).unwrap().uuid, gpus(3)[2].uuid);
        assert_eq!(resolve("0", &v).unwrap().uuid, gpus(3)[2].uuid);
        assert_eq!(resolve("GPU-1a", &v).unwrap().ordinal, 1);
        let e = resolve("cuda:2", &v).unwrap_err().to_string();
        assert!(
            e.contains("cuda:0=GPU-2a") && e.contains("cuda:1=GPU-1a"),
            "{e}"
        );
        assert!(matches!(
            resolve("GPU-0a", &v),
            Err(Error::UnknownDevice { .. })
        ));
        assert!(matches!(resolve("GPU-", &v), Err(Error::BadSpec { .. })));
        assert!(matches!(resolve("cuda:x", &v), Err(Error::BadSpec { .. })));
        assert!(matches!(resolve("", &v), Err(Error::BadSpec { .. })));
    }

    #[test]
    fn device_lists() {
        assert_eq!(
            parse_device_list("cuda:0,cuda:1").unwrap(),
            [DeviceSpec::Ordinal(0), DeviceSpec::Ordinal(1)]
        );
        assert!(parse_device_list("cuda:0,").is_err());
        assert!(parse_device_list("cuda:0,0").is_err());
        let many = (0..=batchcast::MAX_MIRRORS)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_device_list(&many).is_err());
    }

    proptest! {
        #[test]
        fn random_input_never_panics(s in ".{0,300}", n in 0u32..20) {
            let all = gpus(n.min(9));
            let v = visible(Some(&s), &all);
            prop_assert!(v.len() <= all.len());
            for (i, d) in v.iter().enumerate() {
                prop_assert_eq!(d.ordinal as usize, i);
            }
            let _ = resolve(&s, &v);
            let _ = parse_device_list(&s);
        }

        #[test]
        fn lists_of_ordinals_match_cuda(list in proptest::collection::vec(0u32..6, 0..8)) {
            let all = gpus(4);
            let spec = list.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
            let mut want: Vec<u32> = Vec::new();
            for &i in &list {
                if i >= 4 || want.contains(&i) { break; }
                want.push(i);
            }
            let got: Vec<String> = visible(Some(&spec), &all).into_iter().map(|d| d.uuid).collect();
            let want: Vec<String> = want.iter().map(|&i| all[i as usize].uuid.clone()).collect();
            prop_assert_eq!(got, want);
        }
    }
}
