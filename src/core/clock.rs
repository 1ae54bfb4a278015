//! Cached time strings, and the time of a connection's turn.
//!
//! While a connection's task runs ([`hold`]), every read of the clock on its
//! thread gives the time of its first read in that turn, as nginx reads the
//! clock once per pass of its event loop: the dozen stamps a proxied request
//! takes (timers, the balancer, `$upstream_response_time`, the `Date:`
//! header) cost one read of each clock. Outside a held turn, [`now`] and
//! [`system_now`] read the clock.
//!
//! Each worker thread keeps its own copy of the formatted time strings
//! (`Date:` header, `$time_local`, `$time_iso8601`, error-log stamp) and
//! rebuilds them only when the wall-clock second changes. A lookup costs one
//! `SystemTime::now()` (a vDSO call on Linux) and a compare; the strings live
//! in buffers allocated once per thread, so nothing is allocated per call.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, Local, Offset, TimeZone, Timelike, Utc};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// The formatted strings for one second.
struct Cache {
    /// Second the strings were built for; `i64::MIN` before the first build.
    sec: i64,
    http_date: String,
    time_local: String,
    time_iso8601: String,
    err_time: String,
    syslog_time: String,
}

impl Cache {
    fn new() -> Self {
        Cache {
            sec: i64::MIN,
            http_date: String::with_capacity(32),
            time_local: String::with_capacity(32),
            time_iso8601: String::with_capacity(32),
            err_time: String::with_capacity(32),
            syslog_time: String::with_capacity(16),
        }
    }

    fn refresh(&mut self, sec: i64) {
        self.sec = sec;

        let utc = Utc
            .timestamp_opt(sec, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
        let local = Local.from_utc_datetime(&utc.naive_utc());
        let offset = local.offset().fix().local_minus_utc();

        // "Sat, 21 Nov 2026 22:35:38 GMT"
        let s = &mut self.http_date;
        s.clear();
        s.push_str(WEEKDAYS[utc.weekday().num_days_from_monday() as usize]);
        s.push_str(", ");
        push2(s, utc.day());
        s.push(' ');
        s.push_str(MONTHS[utc.month0() as usize]);
        s.push(' ');
        push4(s, utc.year());
        s.push(' ');
        push_hms(s, utc.hour(), utc.minute(), utc.second());
        s.push_str(" GMT");

        let (year, month, day) = (local.year(), local.month(), local.day());
        let (h, m, sec) = (local.hour(), local.minute(), local.second());
        let sign = if offset < 0 { '-' } else { '+' };
        let off = offset.unsigned_abs();
        let (off_h, off_m) = (off / 3600, (off % 3600) / 60);

        // "21/Nov/2026:22:35:38 +0000"
        let s = &mut self.time_local;
        s.clear();
        push2(s, day);
        s.push('/');
        s.push_str(MONTHS[(month - 1) as usize]);
        s.push('/');
        push4(s, year);
        s.push(':');
        push_hms(s, h, m, sec);
        s.push(' ');
        s.push(sign);
        push2(s, off_h);
        push2(s, off_m);

        // "2026-11-21T22:35:38+00:00"
        let s = &mut self.time_iso8601;
        s.clear();
        push4(s, year);
        s.push('-');
        push2(s, month);
        s.push('-');
        push2(s, day);
        s.push('T');
        push_hms(s, h, m, sec);
        s.push(sign);
        push2(s, off_h);
        s.push(':');
        push2(s, off_m);

        // "2026/11/21 22:35:38"
        let s = &mut self.err_time;
        s.clear();
        push4(s, year);
        s.push('/');
        push2(s, month);
        s.push('/');
        push2(s, day);
        s.push(' ');
        push_hms(s, h, m, sec);

        // "Nov  1 22:35:38" (RFC 3164: the day padded with a space)
        let s = &mut self.syslog_time;
        s.clear();
        s.push_str(MONTHS[(month - 1) as usize]);
        s.push(' ');
        if day < 10 {
            s.push(' ');
            s.push(char::from(b'0' + day as u8));
        } else {
            push2(s, day);
        }
        s.push(' ');
        push_hms(s, h, m, sec);
    }
}

fn push2(s: &mut String, n: u32) {
    s.push(char::from(b'0' + (n / 10 % 10) as u8));
    s.push(char::from(b'0' + (n % 10) as u8));
}

fn push4(s: &mut String, year: i32) {
    if (0..=9999).contains(&year) {
        let y = year as u32;
        push2(s, y / 100);
        push2(s, y % 100);
    } else {
        let _ = write!(s, "{year}");
    }
}

fn push_hms(s: &mut String, h: u32, m: u32, sec: u32) {
    push2(s, h);
    s.push(':');
    push2(s, m);
    s.push(':');
    push2(s, sec);
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::new());
    /// A turn is held: the clocks read below are kept for it.
    static HELD: Cell<bool> = const { Cell::new(false) };
    static MONOTONIC: Cell<Option<Instant>> = const { Cell::new(None) };
    static WALL: Cell<Option<SystemTime>> = const { Cell::new(None) };
}

/// A held turn: until it is dropped, [`now`] and [`system_now`] on this
/// thread give the time they first read. Nested holds end with the outer.
pub struct Held {
    outer: bool,
}

/// Hold the clock for a task's turn (a poll: no waiting happens inside it).
pub fn hold() -> Held {
    Held {
        outer: !HELD.replace(true),
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.outer {
            HELD.set(false);
            MONOTONIC.set(None);
            WALL.set(None);
        }
    }
}

/// `fut`, with the clock held for each of its turns (polls).
pub fn held<F: std::future::Future + Unpin>(fut: F) -> HeldTurns<F> {
    HeldTurns(fut)
}

/// A future whose every poll holds the clock ([`held`]).
pub struct HeldTurns<F>(F);

impl<F: std::future::Future + Unpin> std::future::Future for HeldTurns<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let _turn = hold();
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// The monotonic time: the held turn's, or the clock's.
pub fn now() -> Instant {
    kept(&MONOTONIC, Instant::now)
}

/// The time since `t`, by [`now`].
pub fn since(t: Instant) -> std::time::Duration {
    now().duration_since(t)
}

/// The wall-clock time: the held turn's, or the clock's.
pub fn system_now() -> SystemTime {
    kept(&WALL, SystemTime::now)
}

fn kept<T: Copy>(slot: &'static std::thread::LocalKey<Cell<Option<T>>>, read: fn() -> T) -> T {
    if !HELD.get() {
        return read();
    }
    slot.get().unwrap_or_else(|| {
        let t = read();
        slot.set(Some(t));
        t
    })
}

fn now_secs() -> i64 {
    match system_now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64) - 1,
    }
}

fn with_cache<R>(f: impl FnOnce(&Cache) -> R) -> R {
    CACHE.with(|cell| {
        let now = now_secs();
        // A nested call (from inside another `with_*` closure) cannot take the
        // mutable borrow; it simply reuses the strings the outer call holds.
        if let Ok(mut c) = cell.try_borrow_mut()
            && c.sec != now
        {
            c.refresh(now);
        }
        f(&cell.borrow())
    })
}

/// IMF-fixdate for the `Date:` header: `"Sat, 21 Nov 2026 22:35:38 GMT"`.
pub fn with_http_date<R>(f: impl FnOnce(&str) -> R) -> R {
    with_cache(|c| f(&c.http_date))
}

/// `$time_local`: `"21/Nov/2026:22:35:38 +0000"` in the local time zone.
pub fn with_time_local<R>(f: impl FnOnce(&str) -> R) -> R {
    with_cache(|c| f(&c.time_local))
}

/// `$time_iso8601`: `"2026-11-21T22:35:38+00:00"` in the local time zone.
pub fn with_time_iso8601<R>(f: impl FnOnce(&str) -> R) -> R {
    with_cache(|c| f(&c.time_iso8601))
}

/// Error-log time stamp: `"2026/11/21 22:35:38"` in the local time zone.
pub fn with_err_time<R>(f: impl FnOnce(&str) -> R) -> R {
    with_cache(|c| f(&c.err_time))
}

/// Local time as a syslog header has it: `"Nov  1 22:35:38"`.
pub fn with_syslog_time<R>(f: impl FnOnce(&str) -> R) -> R {
    with_cache(|c| f(&c.syslog_time))
}

/// Milliseconds since the Unix epoch (for `$msec` and `$request_time`).
pub fn unix_millis() -> u64 {
    system_now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Append a millisecond count as seconds with three decimals, the way nginx
/// prints `$msec` and `$request_time`: `1234567` → `"1234.567"`.
pub fn push_millis_as_secs(out: &mut Vec<u8>, ms: u64) {
    crate::core::vars::push_u64(out, ms / 1000);
    let frac = (ms % 1000) as u32;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_turn_reads_each_clock_once() {
        let pause = || std::thread::sleep(std::time::Duration::from_millis(2));
        let before = now();
        pause();
        {
            let _turn = hold();
            let (t, w) = (now(), system_now());
            assert!(t > before);
            pause();
            {
                let _inner = hold();
                pause();
                assert_eq!((now(), system_now()), (t, w));
            }
            // The inner hold's end leaves the outer turn's time.
            pause();
            assert_eq!((now(), system_now()), (t, w));
            assert_eq!(
                unix_millis(),
                w.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
            );
        }
        let after = now();
        pause();
        assert!(now() > after);
    }

    #[test]
    fn a_held_future_holds_each_turn_only() {
        let mut turns = Vec::new();
        {
            let mut fut = held(std::future::poll_fn(|cx| {
                turns.push(now());
                std::thread::sleep(std::time::Duration::from_millis(2));
                assert_eq!(now(), *turns.last().unwrap());
                match turns.len() {
                    2 => std::task::Poll::Ready(()),
                    _ => {
                        cx.waker().wake_by_ref();
                        std::task::Poll::Pending
                    }
                }
            }));
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            while std::pin::Pin::new(&mut fut).poll(&mut cx).is_pending() {}
        }
        assert!(turns[1] > turns[0]);
        assert!(!HELD.get());
    }

    /// Run `f` with the cached string and the second it was taken in; retries
    /// if the second changed while we looked.
    fn stable<T>(get: impl Fn() -> T) -> (T, i64) {
        loop {
            let before = now_secs();
            let v = get();
            if now_secs() == before {
                return (v, before);
            }
        }
    }

    fn local(sec: i64) -> DateTime<Local> {
        Local.timestamp_opt(sec, 0).single().unwrap()
    }

    #[test]
    fn http_date_matches_httpdate() {
        let (s, sec) = stable(|| with_http_date(|s| s.to_string()));
        assert_eq!(s.len(), 29);
        let st = UNIX_EPOCH + std::time::Duration::from_secs(sec as u64);
        assert_eq!(s, httpdate::fmt_http_date(st));
    }

    #[test]
    fn local_formats() {
        let (tl, sec) = stable(|| with_time_local(|s| s.to_string()));
        assert_eq!(tl, local(sec).format("%d/%b/%Y:%H:%M:%S %z").to_string());
        assert_eq!(tl.len(), 26);

        let (iso, sec) = stable(|| with_time_iso8601(|s| s.to_string()));
        assert_eq!(iso, local(sec).format("%Y-%m-%dT%H:%M:%S%:z").to_string());
        assert_eq!(iso.len(), 25);

        let (et, sec) = stable(|| with_err_time(|s| s.to_string()));
        assert_eq!(et, local(sec).format("%Y/%m/%d %H:%M:%S").to_string());
        assert_eq!(et.len(), 19);
    }

    #[test]
    fn fixed_second_formats() {
        let mut c = Cache::new();
        // 2026-11-21T22:35:38Z
        let sec = 1_795_300_538;
        c.refresh(sec);
        assert_eq!(c.http_date, "Sat, 21 Nov 2026 22:35:38 GMT");
        let l = local(sec);
        assert_eq!(c.err_time, l.format("%Y/%m/%d %H:%M:%S").to_string());
        c.refresh(0);
        assert_eq!(c.http_date, "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn nested_calls_do_not_panic() {
        let both = with_http_date(|a| with_err_time(|b| format!("{a}|{b}")));
        assert!(both.contains('|'));
    }

    #[test]
    fn millis() {
        let a = unix_millis();
        assert!(a > 1_600_000_000_000);
        let mut v = Vec::new();
        push_millis_as_secs(&mut v, 1_234_567);
        assert_eq!(v, b"1234.567");
        v.clear();
        push_millis_as_secs(&mut v, 5);
        assert_eq!(v, b"0.005");
    }
}
