//! Who may talk to the toolkit's local HTTP servers (the dashboard and the
//! MLflow endpoint): the rules both apply, in one place.
//!
//! - [`is_loopback_host`]: a `Host` header that names this machine, parsed
//!   strictly (against DNS rebinding: a page of `evil.com` that resolves to
//!   127.0.0.1 still sends `Host: evil.com`).
//! - [`is_loopback_origin`]: an `Origin` header of a page served from this
//!   machine (a browser sends it with every cross-site POST).
//! - [`random_token`] and [`same_secret`]: the secret a client must show,
//!   and its comparison in constant time.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether `host` (a `Host` header: `name[:port]`) names this machine:
/// `localhost`, `127.x.y.z` or `[::1]`, with an optional decimal port and
/// nothing else. `127.0.0.1:80@evil.com`, `127.0.0.1:evil.com`, `::1`
/// unbracketed and `localhost.evil.com` are not.
pub fn is_loopback_host(host: &str) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        let Ok(ip) = ip.parse::<Ipv6Addr>() else {
            return false;
        };
        return ip.is_loopback() && port.is_none_or(is_port);
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let name_ok = name.eq_ignore_ascii_case("localhost")
        || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback());
    name_ok && port.is_none_or(is_port)
}

/// A TCP port written in decimal: 1 to 5 digits, at most 65535.
fn is_port(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 5
        && p.bytes().all(|b| b.is_ascii_digit())
        && p.parse::<u16>().is_ok()
}

/// Whether `origin` (an `Origin` header: `scheme://host[:port]`) is a page
/// of this machine. `null` (a sandboxed or file page) is not.
pub fn is_loopback_origin(origin: &str) -> bool {
    let Some((scheme, host)) = origin.split_once("://") else {
        return false;
    };
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && is_loopback_host(host)
}

/// 128 random bits from the kernel, as 32 hex digits.
pub fn random_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_parsed_strictly() {
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "localhost:1",
            "LOCALHOST",
            "[::1]:9",
            "[::1]",
            "127.1.2.3",
            "127.0.0.1:65535",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:80",
            "10.0.0.1:80",
            "",
            "[::2]:1",
            "localhost.evil.com",
            "127.0.0.1:80@evil.com",
            "127.0.0.1:evil.com",
            "127.0.0.1:",
            "127.0.0.1:65536",
            "127.0.0.1:+80",
            "127.0.0.1:80:80",
            "::1",
            "[::1]x",
            "[::1]:",
            "[::1",
            "127.1",
            "evil.com@127.0.0.1",
            "127.0.0.1 ",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn loopback_origins() {
        assert!(is_loopback_origin("http://127.0.0.1:8470"));
        assert!(is_loopback_origin("http://localhost"));
        for bad in [
            "null",
            "https://evil.com",
            "http://127.0.0.1:80@evil.com",
            "file://",
            "127.0.0.1",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn secrets_compare_whole_strings() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        let t = random_token().unwrap();
        assert_eq!(t.len(), 32);
        assert_ne!(t, random_token().unwrap());
    }
}
