//! The browser a User-Agent names, as nginx works it out for
//! `keepalive_disable`, `msie_padding` and `msie_refresh` (and nginx's
//! `$msie`-style checks): MSIE (and versions 4 to 6 without SV1), Opera,
//! Gecko, Chrome, Safari (on Mac OS X), Konqueror.

/// What a User-Agent says, as nginx's request flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Browser {
    pub msie: bool,
    /// MSIE 4, 5, or 6 without SV1.
    pub msie6: bool,
    pub opera: bool,
    pub gecko: bool,
    pub chrome: bool,
    pub safari: bool,
    pub konqueror: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

impl Browser {
    /// The browser of a User-Agent value (case matters, as in nginx).
    pub fn of(ua: &[u8]) -> Browser {
        let mut b = Browser::default();
        if let Some(i) = find(ua, b"MSIE ")
            && i + 7 < ua.len()
        {
            b.msie = true;
            if ua[i + 6] == b'.' {
                match ua[i + 5] {
                    b'4' | b'5' => b.msie6 = true,
                    b'6' => b.msie6 = find(&ua[i + 8..], b"SV1").is_none(),
                    _ => {}
                }
            }
        }
        if find(ua, b"Opera").is_some() {
            b.opera = true;
            b.msie = false;
            b.msie6 = false;
        }
        if !b.msie && !b.opera {
            if find(ua, b"Gecko/").is_some() {
                b.gecko = true;
            } else if find(ua, b"Chrome/").is_some() {
                b.chrome = true;
            } else if find(ua, b"Safari/").is_some() && find(ua, b"Mac OS X").is_some() {
                b.safari = true;
            } else if find(ua, b"Konqueror").is_some() {
                b.konqueror = true;
            }
        }
        b
    }

    /// The browser of a request head's User-Agent (none without one).
    pub fn of_head(head: &crate::core::message::head::RequestHead) -> Browser {
        head.header("user-agent")
            .map(Browser::of)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents() {
        let b = Browser::of(b"Mozilla/4.0 (compatible; MSIE 5.0; Windows 98)");
        assert!(b.msie && b.msie6);
        let b = Browser::of(b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)");
        assert!(b.msie && !b.msie6);
        let b = Browser::of(b"Mozilla/4.0 (compatible; MSIE 7.0)");
        assert!(b.msie && !b.msie6);
        assert!(!Browser::of(b"MSIE 5.").msie);
        let b = Browser::of(b"Opera/9.80 (MSIE 6.0)");
        assert!(b.opera && !b.msie && !b.msie6);
        assert!(Browser::of(b"Mac OS X Safari/7534.48.3").safari);
        assert!(!Browser::of(b"Safari/7534.48.3").safari);
        assert!(Browser::of(b"Chrome/1 Safari/2 Mac OS X").chrome);
        assert!(Browser::of(b"Gecko/2010 Firefox").gecko);
    }
}
