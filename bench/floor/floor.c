/* floor.c: the smallest useful HTTP/1.1 server, as a floor for CPU per request.
 *
 * One thread, one level-triggered epoll loop, keep-alive, pipelining; every
 * request (anything ending in an empty line) gets the same fixed response
 * with the body given on the command line.  No parsing, no Date header, no
 * timeouts: what is left is one read and one write per request.  A body of
 * "@PATH" is that file's, sent as a server sends a file too big to keep in
 * memory: the head with MSG_MORE, then sendfile() from the open file.
 *
 *   cc -O2 -o floor floor.c && taskset -c 0 ./floor 28090 ab
 *   taskset -c 0 ./floor 28090 @/srv/www/21k.txt
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXFD 65536
static unsigned char tail[MAXFD]; /* how much of "\r\n\r\n" the last read ended with */
static char resp[256];
static size_t resp_len;
static char out[64 * 256];

static void die(const char *what) { perror(what); exit(1); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: floor PORT [BODY]\n"); return 2; }
    const char *body = argc > 2 ? argv[2] : "ab";
    int file = -1;
    off_t file_len = 0;
    if (body[0] == '@') {                      /* the head here, the body by sendfile() */
        struct stat st;
        if ((file = open(body + 1, O_RDONLY)) < 0 || fstat(file, &st) < 0) die(body + 1);
        file_len = st.st_size;
        resp_len = (size_t)snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nServer: floor\r\n"
            "Content-Type: text/plain\r\nContent-Length: %lld\r\n\r\n", (long long)file_len);
    } else {
        resp_len = (size_t)snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nServer: floor\r\n"
            "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    }
    if (resp_len >= sizeof resp) { fprintf(stderr, "body too long\n"); return 2; }

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    if (ls < 0) die("socket");
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    if (listen(ls, 4096) < 0) die("listen");

    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = ls }, evs[512];
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev) < 0) die("epoll");
    char buf[16384];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {                    /* accept everything that is waiting */
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXFD) { close(c); continue; }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    tail[c] = 0;
                    ev.events = EPOLLIN; ev.data.fd = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN) continue;
                close(fd);                      /* EOF or error: closing removes it from epoll */
                continue;
            }
            /* count request ends ("\r\n\r\n"), also across reads */
            static const char end[] = "\r\n\r\n";
            unsigned st = tail[fd], reqs = 0;
            for (ssize_t j = 0; j < r; j++) {
                if (buf[j] == end[st]) st++;
                else st = buf[j] == '\r' ? 1 : 0;
                if (st == 4) { reqs++; st = 0; }
            }
            tail[fd] = (unsigned char)st;
            for (; file >= 0 && reqs > 0; reqs--) {   /* a file: head, then sendfile */
                off_t off = 0;
                if (send(fd, resp, resp_len, MSG_MORE) != (ssize_t)resp_len
                    || sendfile(fd, file, &off, (size_t)file_len) != file_len) { close(fd); break; }
            }
            while (reqs > 0) {                  /* one write per 64 pipelined requests */
                unsigned k = reqs < 64 ? reqs : 64;
                size_t len = 0;
                for (unsigned j = 0; j < k; j++, len += resp_len) memcpy(out + len, resp, resp_len);
                reqs -= k;
                if (write(fd, out, len) != (ssize_t)len) { close(fd); break; } /* no buffering: a short write drops the connection */
            }
        }
    }
}
