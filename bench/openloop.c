/* Open-loop HTTP/1.1 load generator: latency at a fixed offered load, free of
 * coordinated omission (the idea of wrk2, which Debian does not package).
 *
 *   openloop -r RATE -c CONNECTIONS -d SECONDS [-k KEY] [-m MODEL] [-H 'Name: value']
 *            http://HOST:PORT
 *
 * Sends the request of bench/chat.lua (POST /v1/chat/completions, a small JSON chat
 * body, Authorization: Bearer KEY) on CONNECTIONS keep-alive connections, one
 * request in flight per connection (no pipelining).
 *
 * Request i is due at start + i / RATE, whatever happened to the requests before it:
 * a fixed timetable, not "send the next when the previous answer came back" (wrk's
 * closed loop). A due request goes out on any idle connection; when none is idle it
 * waits for one, and its latency still runs from its due time. So a stall of the
 * server counts against every request it held up, as it would for users arriving at
 * that rate, not only against the few requests in flight when it began.
 *
 * After the last due time the answers still owed are awaited, at most 10 s more;
 * requests without an answer by then count as "unfinished". Prints one JSON line:
 * the achieved rate (answers / seconds until the last answer, at least SECONDS),
 * latency percentiles in ms over all answered requests (non-2xx included), counts.
 * Exit status 0 once it ran (the caller judges the counts), 2 on bad arguments.
 *
 * Built at bench time: cc -O2 -o openloop bench/openloop.c (bench/openloop.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL
#define DRAIN_NS (10 * NS)

struct conn {
    int fd;                 /* -1: could not (re)connect, out of the run */
    int busy;               /* a request is in flight */
    int64_t due;            /* its due time: the latency's start */
    size_t woff;            /* bytes of the request written so far */
    int wantout;            /* waiting for EPOLLOUT to write the rest */
    char *buf;              /* the answer read so far, NUL-terminated */
    size_t len, cap;
};

static struct conn *conns;
static int nconns, nidle, nbusy, ep;
static struct addrinfo *addr;
static char *req;
static size_t req_len;
static int64_t *lat;        /* latency of every answered request, ns */
static long nlat, nlost, non2xx, err_connect, err_read, err_write, err_parse;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * NS + ts.tv_nsec;
}

static void die(const char *msg)
{
    fprintf(stderr, "openloop: %s\n", msg);
    exit(2);
}

/* ---- connections -------------------------------------------------------------- */

static void conn_open(struct conn *c)
{
    int one = 1, fd = socket(addr->ai_family, SOCK_STREAM, 0);
    c->fd = -1;
    c->busy = 0;
    c->len = 0;
    c->wantout = 0;
    if (fd < 0 || connect(fd, addr->ai_addr, addr->ai_addrlen) < 0) {
        if (fd >= 0)
            close(fd);
        err_connect++;
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    c->fd = fd;
    nidle++;
}

/* Close and open again: after "Connection: close", an error, or a closed idle
 * connection. A request still in flight is lost (the caller counts the error). */
static void conn_reopen(struct conn *c)
{
    if (c->busy) {
        nbusy--;
        nlost++;
    } else {
        nidle--;
    }
    close(c->fd);
    conn_open(c);
}

static void conn_write(struct conn *c)
{
    while (c->woff < req_len) {
        ssize_t n = send(c->fd, req + c->woff, req_len - c->woff, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            c->wantout = 1;
            return;
        }
        if (n <= 0) {
            err_write++;
            conn_reopen(c);
            return;
        }
        c->woff += n;
    }
    if (c->wantout) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->wantout = 0;
    }
}

static void conn_send(struct conn *c, int64_t due)
{
    nidle--;
    nbusy++;
    c->busy = 1;
    c->due = due;
    c->woff = 0;
    c->len = 0;
    conn_write(c);
}

/* ---- HTTP/1.1 answers ----------------------------------------------------------- */

/* Does the header line at `p` (ending at the next CR) name `token` in its value? */
static int line_has(const char *p, const char *token)
{
    size_t n = strlen(token);
    for (p = strchr(p, ':') + 1; *p && *p != '\r'; p++)
        if (strncasecmp(p, token, n) == 0)
            return 1;
    return 0;
}

/* Length of a chunked body at p[0..len) with its trailer, 0 if incomplete, -1 if bad. */
static long chunked_length(const char *p, size_t len)
{
    size_t i = 0;
    for (;;) {
        const char *eol = memmem(p + i, len - i, "\r\n", 2);
        if (!eol)
            return 0;
        char *end;
        unsigned long size = strtoul(p + i, &end, 16);
        if (end == p + i)
            return -1;
        i = eol - p + 2;
        if (size == 0)
            break;
        if (len - i < size + 2)
            return 0;
        if (memcmp(p + i + size, "\r\n", 2) != 0)
            return -1;
        i += size + 2;
    }
    for (;;) {              /* trailer fields, then an empty line */
        const char *eol = memmem(p + i, len - i, "\r\n", 2);
        if (!eol)
            return 0;
        size_t n = eol - (p + i);
        i += n + 2;
        if (n == 0)
            return i;
    }
}

/* Length of the complete answer at the start of b[0..len), 0 if more is needed, -1 if
 * it is not HTTP/1.x. `eof`: the server has closed (ends a body without a length). */
static long answer_length(const char *b, size_t len, int eof, int *status, int *closes)
{
    const char *end = memmem(b, len, "\r\n\r\n", 4);
    if (!end)
        return eof && len ? -1 : 0;
    if (len < 12 || memcmp(b, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(b + 9);
    *closes = b[7] == '0';  /* HTTP/1.0 closes unless told otherwise; we never ask */
    long head = end - b + 4, clen = -1;
    int chunked = 0;
    for (const char *p = strchr(b, '\n') + 1; p < end; p = strchr(p, '\n') + 1) {
        if (strncasecmp(p, "content-length:", 15) == 0)
            clen = strtol(p + 15, NULL, 10);
        else if (strncasecmp(p, "transfer-encoding:", 18) == 0)
            chunked = line_has(p, "chunked");
        else if (strncasecmp(p, "connection:", 11) == 0)
            *closes = line_has(p, "close");
    }
    if (*status == 204 || *status == 304)
        return head;
    if (chunked) {
        long n = chunked_length(b + head, len - head);
        return n > 0 ? head + n : n;
    }
    if (clen >= 0)
        return len - head >= (size_t)clen ? head + clen : 0;
    *closes = 1;            /* the body runs until the server closes */
    return eof ? (long)len : 0;
}

static void conn_read(struct conn *c, int64_t now)
{
    if (c->cap - c->len < 4096) {
        c->cap = c->cap ? c->cap * 2 : 16384;
        c->buf = realloc(c->buf, c->cap);
        if (!c->buf)
            die("out of memory");
    }
    ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    int eof = n <= 0;
    if (!eof)
        c->len += n;
    c->buf[c->len] = '\0';
    if (!c->busy) {         /* the server closed an idle connection, or spoke unasked */
        if (c->len)
            err_parse++;
        conn_reopen(c);
        return;
    }
    int status = 0, closes = 0;
    long used = answer_length(c->buf, c->len, eof, &status, &closes);
    if (used == 0 && !eof)
        return;
    if (used <= 0) {        /* closed before a whole answer, or not HTTP */
        if (eof)
            err_read++;
        else
            err_parse++;
        conn_reopen(c);
        return;
    }
    lat[nlat++] = now - c->due;
    if (status < 200 || status > 299)
        non2xx++;
    c->busy = 0;
    nbusy--;
    nidle++;
    if ((size_t)used != c->len)
        err_parse++;        /* bytes after the answer, which we did not ask for */
    if (closes || (size_t)used != c->len)
        conn_reopen(c);
    c->len = 0;
}

/* ---- the run -------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_ms(double p)
{
    if (nlat == 0)
        return 0;
    long i = (long)(p / 100 * nlat + 0.999999) - 1;
    return lat[i < 0 ? 0 : i] / 1e6;
}

int main(int argc, char **argv)
{
    double rate = 0, seconds = 10;
    const char *key = "", *model = "bench-chat";
    char extra[4096] = "";
    int opt;
    nconns = 32;
    while ((opt = getopt(argc, argv, "r:c:d:k:m:H:")) != -1) {
        switch (opt) {
        case 'r': rate = atof(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'k': key = optarg; break;
        case 'm': model = optarg; break;
        case 'H':
            if (strlen(extra) + strlen(optarg) + 3 > sizeof extra)
                die("too many -H headers");
            strcat(strcat(extra, optarg), "\r\n");
            break;
        default: die("usage: openloop -r RATE -c CONNS -d SECONDS [-k KEY] [-m MODEL] "
                     "[-H 'Name: value'] http://HOST:PORT");
        }
    }
    if (optind != argc - 1 || strncmp(argv[optind], "http://", 7) != 0)
        die("one http://HOST:PORT argument expected");
    if (rate <= 0 || seconds <= 0 || nconns < 1)
        die("-r, -d and -c must be positive");

    char host[256], port[16] = "80";
    const char *hp = argv[optind] + 7;
    size_t hlen = strcspn(hp, "/");
    if (hlen >= sizeof host)
        die("host too long");
    memcpy(host, hp, hlen);
    host[hlen] = '\0';
    char *colon = strrchr(host, ':');
    if (colon) {
        snprintf(port, sizeof port, "%s", colon + 1);
        *colon = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (getaddrinfo(host, port, &hints, &addr) != 0)
        die("cannot resolve the host");

    char body[512], auth[512] = "";
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"Say hello to the benchmark.\"}],\"max_tokens\":16}", model);
    if (*key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", key);
    req_len = asprintf(&req, "POST /v1/chat/completions HTTP/1.1\r\nHost: %.*s\r\n"
                       "Content-Type: application/json\r\n%s%sContent-Length: %zu\r\n\r\n%s",
                       (int)hlen, hp, auth, extra, strlen(body), body);

    long total = (long)(rate * seconds);
    lat = malloc((total + 1) * sizeof *lat);
    conns = calloc(nconns, sizeof *conns);
    ep = epoll_create1(0);
    if (!lat || !conns || ep < 0)
        die("cannot set up (memory, epoll)");
    prctl(PR_SET_TIMERSLACK, 1UL);  /* wake at the due time, not up to 50 us later */
    for (int i = 0; i < nconns; i++)
        conn_open(&conns[i]);

    int64_t start = now_ns(), last_answer = start;
    int64_t deadline = start + (int64_t)(seconds * NS) + DRAIN_NS;
    long next = 0;          /* the next request to send, in timetable order */
    int rr = 0;             /* where the search for an idle connection starts */
    struct epoll_event evs[64];
    for (;;) {
        int64_t now = now_ns();
        int64_t due = start + (int64_t)(next * (NS / rate));
        while (next < total && due <= now && nidle > 0) {
            while (conns[rr].fd < 0 || conns[rr].busy)
                rr = (rr + 1) % nconns;
            conn_send(&conns[rr], due);
            rr = (rr + 1) % nconns;
            next++;
            due = start + (int64_t)(next * (NS / rate));
        }
        if ((next == total && nbusy == 0) || (nidle == 0 && nbusy == 0) || now >= deadline)
            break;
        /* Wake at the next due time if a connection is free for it; else an answer
         * (which frees one) wakes us. */
        int64_t wait = next < total && nidle > 0 ? due - now_ns() : NS / 10;
        struct timespec ts = {wait > 0 ? wait / NS : 0, wait > 0 ? wait % NS : 0};
        int n = epoll_pwait2(ep, evs, 64, &ts, NULL);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->fd < 0)
                continue;
            long before = nlat;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_read(c, now = now_ns());
            if (nlat != before)
                last_answer = now;
            if ((evs[i].events & EPOLLOUT) && c->fd >= 0 && c->wantout)
                conn_write(c);
        }
    }

    qsort(lat, nlat, sizeof *lat, cmp_i64);
    double sum = 0;
    for (long i = 0; i < nlat; i++)
        sum += lat[i];
    double elapsed = (last_answer - start) / 1e9;
    if (elapsed < seconds)
        elapsed = seconds;
    printf("{\"target_rate\":%.1f,\"rate\":%.1f,\"duration_s\":%.3f,\"connections\":%d,"
           "\"requests\":%ld,\"answered\":%ld,\"non_2xx\":%ld,\"unfinished\":%ld,"
           "\"errors\":{\"connect\":%ld,\"read\":%ld,\"write\":%ld,\"parse\":%ld},"
           "\"latency_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p99.9\":%.3f,"
           "\"max\":%.3f,\"mean\":%.3f}}\n",
           rate, nlat / elapsed, elapsed, nconns, total, nlat, non2xx,
           total - nlat - nlost,
           err_connect, err_read, err_write, err_parse,
           pct_ms(50), pct_ms(90), pct_ms(99), pct_ms(99.9),
           nlat ? lat[nlat - 1] / 1e6 : 0.0, nlat ? sum / nlat / 1e6 : 0.0);
    return 0;
}
