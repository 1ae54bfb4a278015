/* echo.c: the TCP peers and load of the stream experiment (bench/run stream).
 *
 *   echo serve PORT                    echo every byte back (the backend of the 1 KB exchanges)
 *   echo source PORT MB                send MB MiB to each connection, then close (the 100 MB transfer)
 *   echo exchange PORT CONNS SECONDS SIZE
 *                                      CONNS connections, each sending SIZE bytes and reading
 *                                      the SIZE bytes back, again and again for SECONDS
 *   echo fetch PORT SECONDS MB         one connection after another, each read to its end
 *                                      (MB MiB expected), until SECONDS have passed
 *   echo relay PORT TO [PORT TO]...    the C floor of a TCP proxy: each connection to PORT
 *                                      gets one to TO, and bytes are copied both ways in
 *                                      16 KB reads (nginx's and vireo's proxy_buffer_size)
 *
 * The clients print one line, "units=N bytes=B errors=E seconds=S": exchanges or
 * transfers completed. One thread, one level-triggered epoll loop, non-blocking
 * sockets, on 127.0.0.1: as little CPU as a TCP peer can use, so that what is
 * measured is the proxy between them.
 *
 *   cc -O2 -o echo echo.c && taskset -c 0 ./echo serve 28095
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536
#define BUF (256 * 1024)

static char buf[BUF];
/* Per descriptor: bytes still to write (echo: pending echo; source: left to send;
 * exchange: left to send of this round) and, for echo, where they start. */
static long long left[MAXFD];
static size_t pend_at[MAXFD], pend_len[MAXFD];
static char *pend[MAXFD];
static long long got[MAXFD]; /* exchange: bytes of the answer read this round */
static int peer[MAXFD];      /* relay: the other end of the connection's pair */
static int ended[MAXFD];     /* relay: the connection's reading end saw EOF */
static int dest[MAXFD];      /* relay: per listener, the port its connections go to */

static void die(const char *what) { perror(what); exit(1); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static struct sockaddr_in addr(int port) {
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static void ctl(int ep, int op, int fd, unsigned events) {
    struct epoll_event ev = { .events = events, .data.fd = fd };
    if (epoll_ctl(ep, op, fd, &ev) < 0 && op != EPOLL_CTL_DEL) die("epoll_ctl");
}

static void drop(int ep, int fd) {
    ctl(ep, EPOLL_CTL_DEL, fd, 0);
    free(pend[fd]);
    pend[fd] = NULL;
    pend_len[fd] = pend_at[fd] = 0;
    left[fd] = got[fd] = 0;
    close(fd);
}

static int listener(int port) {
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    if (ls < 0) die("socket");
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = addr(port);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    if (listen(ls, 4096) < 0) die("listen");
    return ls;
}

/* serve (mb < 0) and source (mb >= 0): accept, then echo or send mb MiB. */
static _Noreturn void server(int port, long long mb) {
    int ls = listener(port), ep = epoll_create1(0), one = 1;
    if (ep < 0) die("epoll_create1");
    ctl(ep, EPOLL_CTL_ADD, ls, EPOLLIN);
    memset(buf, 'x', sizeof buf);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXFD) { close(c); continue; }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    if (mb >= 0) {
                        left[c] = mb << 20;
                        ctl(ep, EPOLL_CTL_ADD, c, EPOLLOUT);
                    } else {
                        ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN);
                    }
                }
                continue;
            }
            if (mb >= 0) { /* source */
                while (left[fd] > 0) {
                    ssize_t w = send(fd, buf, left[fd] < BUF ? (size_t)left[fd] : BUF, MSG_NOSIGNAL);
                    if (w < 0) {
                        if (errno != EAGAIN) left[fd] = -1;
                        break;
                    }
                    left[fd] -= w;
                }
                if (left[fd] <= 0) drop(ep, fd);
                continue;
            }
            if (pend_len[fd]) { /* echo: the rest of an echo the socket did not take */
                ssize_t w = send(fd, pend[fd] + pend_at[fd], pend_len[fd], MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN) { drop(ep, fd); continue; }
                if (w > 0) { pend_at[fd] += (size_t)w; pend_len[fd] -= (size_t)w; }
                if (!pend_len[fd]) ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN);
                continue;
            }
            ssize_t r = recv(fd, buf, BUF, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN)) { drop(ep, fd); continue; }
            if (r < 0) continue;
            ssize_t w = send(fd, buf, (size_t)r, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN) { drop(ep, fd); continue; }
            if (w < 0) w = 0;
            if (w < r) { /* keep the rest, stop reading until it is out */
                pend[fd] = realloc(pend[fd], (size_t)(r - w));
                if (!pend[fd]) die("realloc");
                memcpy(pend[fd], buf + w, (size_t)(r - w));
                pend_at[fd] = 0;
                pend_len[fd] = (size_t)(r - w);
                ctl(ep, EPOLL_CTL_MOD, fd, EPOLLOUT);
            }
        }
    }
}

static int dial(int port) {
    int c = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (c < 0) die("socket");
    struct sockaddr_in a = addr(port);
    if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) { close(c); return -1; }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

static void report(long long units, long long bytes, long long errors, double secs) {
    printf("units=%lld bytes=%lld errors=%lld seconds=%.3f\n", units, bytes, errors, secs);
}

/* CONNS connections doing SIZE-byte exchanges for SECONDS. */
static int exchange(int port, int conns, double seconds, long long size) {
    if (size > BUF) { fprintf(stderr, "size over %d\n", BUF); return 2; }
    int ep = epoll_create1(0), open_ = 0;
    if (ep < 0) die("epoll_create1");
    memset(buf, 'e', sizeof buf);
    long long units = 0, bytes = 0, errors = 0;
    for (int i = 0; i < conns; i++) {
        int c = dial(port);
        if (c < 0 || c >= MAXFD) { errors++; if (c >= 0) close(c); continue; }
        if (fcntl(c, F_SETFL, O_NONBLOCK) < 0) die("fcntl");
        left[c] = size;
        got[c] = 0;
        ctl(ep, EPOLL_CTL_ADD, c, EPOLLOUT);
        open_++;
    }
    double t0 = now(), end = t0 + seconds;
    static char in[BUF];
    struct epoll_event evs[256];
    while (open_ > 0 && now() < end) {
        int n = epoll_wait(ep, evs, 256, 100);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (left[fd] > 0) {
                ssize_t w = send(fd, buf, (size_t)left[fd], MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN) { errors++; drop(ep, fd); open_--; continue; }
                if (w > 0) left[fd] -= w;
                if (!left[fd]) ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN);
                continue;
            }
            ssize_t r = recv(fd, in, BUF, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN)) { errors++; drop(ep, fd); open_--; continue; }
            if (r < 0) continue;
            got[fd] += r;
            if (got[fd] >= size) { /* the answer is in: the next round */
                units++;
                bytes += size;
                got[fd] = 0;
                left[fd] = size;
                ssize_t w = send(fd, buf, (size_t)size, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN) { errors++; drop(ep, fd); open_--; continue; }
                if (w > 0) left[fd] -= w;
                if (left[fd]) ctl(ep, EPOLL_CTL_MOD, fd, EPOLLOUT);
            }
        }
    }
    report(units, bytes, errors, now() - t0);
    return 0;
}

/* Transfers of MB MiB, one after another, until SECONDS have passed. */
static int fetch(int port, double seconds, long long mb) {
    long long units = 0, bytes = 0, errors = 0, want = mb << 20;
    double t0 = now(), end = t0 + seconds;
    do {
        int c = dial(port);
        if (c < 0) { errors++; break; }
        long long n = 0;
        ssize_t r;
        while ((r = recv(c, buf, BUF, 0)) > 0) n += r;
        close(c);
        bytes += n;
        if (r < 0 || n != want) errors++;
        else units++;
    } while (now() < end);
    report(units, bytes, errors, now() - t0);
    return 0;
}

/* relay: stop reading `from` until what is pending for `to` is out (or start again). */
static void hold(int ep, int from, int to, int held) {
    ctl(ep, EPOLL_CTL_MOD, from, held ? 0 : EPOLLIN);
    ctl(ep, EPOLL_CTL_MOD, to, held ? EPOLLOUT : EPOLLIN);
}

static void unpair(int ep, int fd) {
    int p = peer[fd];
    ended[fd] = ended[p] = 0;
    drop(ep, fd);
    drop(ep, p);
}

/* relay: the ports to listen on and the ports their connections go to. */
static _Noreturn void relay(int pairs, char **ports) {
    int ep = epoll_create1(0), one = 1;
    if (ep < 0) die("epoll_create1");
    static char chunk[16384];
    for (int i = 0; i < pairs; i++) {
        int ls = listener(atoi(ports[2 * i]));
        dest[ls] = atoi(ports[2 * i + 1]);
        ctl(ep, EPOLL_CTL_ADD, ls, EPOLLIN);
    }
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (dest[fd]) {
                int c;
                while ((c = accept4(fd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int u = dial(dest[fd]);
                    if (c >= MAXFD || u < 0 || u >= MAXFD) {
                        close(c);
                        if (u >= 0) close(u);
                        continue;
                    }
                    if (fcntl(u, F_SETFL, O_NONBLOCK) < 0) die("fcntl");
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    peer[c] = u;
                    peer[u] = c;
                    ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN);
                    ctl(ep, EPOLL_CTL_ADD, u, EPOLLIN);
                }
                continue;
            }
            int p = peer[fd];
            if (pend_len[fd]) { /* writable again: what `p` sent that `fd` had no room for */
                ssize_t w = send(fd, pend[fd] + pend_at[fd], pend_len[fd], MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN) { unpair(ep, fd); continue; }
                if (w > 0) { pend_at[fd] += (size_t)w; pend_len[fd] -= (size_t)w; }
                if (!pend_len[fd]) hold(ep, p, fd, 0);
                continue;
            }
            ssize_t r = recv(fd, chunk, sizeof chunk, 0);
            if (r < 0 && errno == EAGAIN) continue;
            if (r < 0) { unpair(ep, fd); continue; }
            if (r == 0) { /* the end of one direction: passed on; both ended, the pair closes */
                ended[fd] = 1;
                if (ended[p]) { unpair(ep, fd); continue; }
                shutdown(p, SHUT_WR);
                ctl(ep, EPOLL_CTL_MOD, fd, 0);
                continue;
            }
            ssize_t w = send(p, chunk, (size_t)r, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN) { unpair(ep, fd); continue; }
            if (w < 0) w = 0;
            if (w < r) {
                pend[p] = realloc(pend[p], (size_t)(r - w));
                if (!pend[p]) die("realloc");
                memcpy(pend[p], chunk + w, (size_t)(r - w));
                pend_at[p] = 0;
                pend_len[p] = (size_t)(r - w);
                hold(ep, fd, p, 1);
            }
        }
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "serve") && argc == 3) server(atoi(argv[2]), -1);
    if (!strcmp(mode, "source") && argc == 4) server(atoi(argv[2]), atoll(argv[3]));
    if (!strcmp(mode, "exchange") && argc == 6)
        return exchange(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), atoll(argv[5]));
    if (!strcmp(mode, "fetch") && argc == 5) return fetch(atoi(argv[2]), atof(argv[3]), atoll(argv[4]));
    if (!strcmp(mode, "relay") && argc >= 4 && argc % 2 == 0) relay((argc - 2) / 2, argv + 2);
    fprintf(stderr, "usage: echo serve PORT | source PORT MB | exchange PORT CONNS SECONDS SIZE"
                    " | fetch PORT SECONDS MB | relay PORT TO [PORT TO]...\n");
    return 2;
}
