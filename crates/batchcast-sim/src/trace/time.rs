//! `YYYY-MM-DD HH:MM:SS` timestamps (as in Helios and Philly) to seconds
//! since 1970 (UTC, no leap seconds), or plain numbers of seconds. Dates
//! are checked against the proleptic Gregorian calendar (`time`): a day a
//! month does not have is no timestamp.

/// Seconds for `s`, or `None` if it is neither a number nor a timestamp.
pub fn parse_datetime(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    let (date, clock) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = clock.trim_end_matches('Z').split(':');
    let h: i64 = t.next()?.parse().ok()?;
    let mi: i64 = t.next()?.parse().ok()?;
    let sec: f64 = t.next().unwrap_or("0").parse().ok()?;
    // Four-digit years (the range of `time`'s dates), real calendar days.
    if !(1..=9999).contains(&y) || !(0..24).contains(&h) || !(0..60).contains(&mi) {
        return None;
    }
    let month = time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(i32::try_from(y).ok()?, month, u8::try_from(day).ok()?)
            .ok()?;
    let start = time::UtcDateTime::new(date, time::Time::MIDNIGHT).unix_timestamp();
    Some((start + h * 3600 + mi * 60) as f64 + sec)
}
