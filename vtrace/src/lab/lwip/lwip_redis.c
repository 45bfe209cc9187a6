/*
 * lwip-redis: a minimal Redis-protocol server (PING, SET, GET, CONFIG) on
 * Debian's liblwip, a user-space TCP/IP stack, attached to a tap device.
 * It stands in for a Unikraft unikernel's lwIP network path: segments are
 * built by lwIP (no TSO/GSO), then written to the tap by tapif.
 *
 * usage: lwip-redis IP NETMASK GATEWAY   (tap name from PRECONFIGURED_TAPIF)
 * built by `vtrace lab up lwip` with: cc -O2 lwip_redis.c -I/usr/include/lwip -llwip -lpthread
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lwip/init.h"
#include "lwip/netif.h"
#include "lwip/sockets.h"
#include "lwip/tcpip.h"
#include "netif/tapif.h"

#define MAX_KEYS 4096
#define BUF 65536

struct entry { char *key; char *val; size_t len; };
static struct entry table[MAX_KEYS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct netif tap;

static struct entry *lookup(const char *key, size_t klen, int create) {
    unsigned h = 5381;
    for (size_t i = 0; i < klen; i++) h = h * 33 + (unsigned char)key[i];
    for (unsigned n = 0; n < MAX_KEYS; n++) {
        struct entry *e = &table[(h + n) % MAX_KEYS];
        if (e->key == NULL) {
            if (!create) return NULL;
            e->key = strndup(key, klen);
            return e;
        }
        if (strlen(e->key) == klen && memcmp(e->key, key, klen) == 0) return e;
    }
    return NULL;
}

static int send_all(int s, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = lwip_send(s, p, n, 0);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Parses one RESP array command from buf[0..len); returns bytes used, 0 if incomplete. */
static size_t parse(const char *buf, size_t len, const char **argv, size_t *argl, int *argc) {
    const char *p = buf, *end = buf + len;
    if (p >= end || *p != '*') return 0;
    char *q;
    long n = strtol(p + 1, &q, 10);
    if (q + 2 > end || q[0] != '\r') return 0;
    p = q + 2;
    *argc = 0;
    for (long i = 0; i < n; i++) {
        if (p >= end || *p != '$') return 0;
        long l = strtol(p + 1, &q, 10);
        if (q + 2 > end) return 0;
        p = q + 2;
        if (p + l + 2 > end) return 0;
        if (*argc < 8) { argv[*argc] = p; argl[*argc] = (size_t)l; (*argc)++; }
        p += l + 2;
    }
    return (size_t)(p - buf);
}

static void reply(int s, const char **argv, const size_t *argl, int argc) {
    char head[32];
    if (argc >= 3 && argl[0] == 3 && strncasecmp(argv[0], "SET", 3) == 0) {
        pthread_mutex_lock(&table_lock);
        struct entry *e = lookup(argv[1], argl[1], 1);
        if (e) {
            free(e->val);
            e->val = malloc(argl[2]);
            memcpy(e->val, argv[2], argl[2]);
            e->len = argl[2];
        }
        pthread_mutex_unlock(&table_lock);
        send_all(s, "+OK\r\n", 5);
    } else if (argc >= 2 && argl[0] == 3 && strncasecmp(argv[0], "GET", 3) == 0) {
        pthread_mutex_lock(&table_lock);
        struct entry *e = lookup(argv[1], argl[1], 0);
        if (e && e->val) {
            /* One write of header + value + CRLF: lwIP segments it at its MSS. */
            size_t n = (size_t)snprintf(head, sizeof head, "$%zu\r\n", e->len);
            char *out = malloc(n + e->len + 2);
            memcpy(out, head, n);
            memcpy(out + n, e->val, e->len);
            memcpy(out + n + e->len, "\r\n", 2);
            pthread_mutex_unlock(&table_lock);
            send_all(s, out, n + e->len + 2);
            free(out);
        } else {
            pthread_mutex_unlock(&table_lock);
            send_all(s, "$-1\r\n", 5);
        }
    } else if (argc >= 1 && argl[0] == 4 && strncasecmp(argv[0], "PING", 4) == 0) {
        send_all(s, "+PONG\r\n", 7);
    } else if (argc >= 1 && argl[0] == 6 && strncasecmp(argv[0], "CONFIG", 6) == 0) {
        send_all(s, "*0\r\n", 4);
    } else {
        send_all(s, "-ERR unknown command\r\n", 22);
    }
}

static void *serve(void *arg) {
    int s = (int)(long)arg;
    char *buf = malloc(BUF);
    size_t have = 0;
    pthread_setname_np(pthread_self(), "lwip-conn");
    for (;;) {
        if (have == BUF) break; /* command larger than the buffer */
        ssize_t r = lwip_recv(s, buf + have, BUF - have, 0);
        if (r <= 0) break;
        have += (size_t)r;
        size_t used;
        const char *argv[8];
        size_t argl[8];
        int argc;
        while ((used = parse(buf, have, argv, argl, &argc)) > 0) {
            reply(s, argv, argl, argc);
            memmove(buf, buf + used, have - used);
            have -= used;
        }
    }
    lwip_close(s);
    free(buf);
    return NULL;
}

/* Names lwIP's own threads (tcpip, then tapif input) after their jobs. */
static void name_stack_threads(void) {
    const char *names[] = {"lwip-tcpip", "lwip-tapif"};
    int k = 0, self = getpid();
    struct dirent **list;
    int n = scandir("/proc/self/task", &list, NULL, versionsort);
    for (int i = 0; i < n; i++) {
        int tid = atoi(list[i]->d_name);
        if (tid > 0 && tid != self && k < 2) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
            FILE *f = fopen(path, "w");
            if (f) { fputs(names[k], f); fclose(f); }
            k++;
        }
        free(list[i]);
    }
    free(list);
}

int main(int argc, char **argv) {
    if (argc != 4 || getenv("PRECONFIGURED_TAPIF") == NULL) {
        fprintf(stderr, "usage: PRECONFIGURED_TAPIF=tap lwip-redis IP NETMASK GATEWAY\n");
        return 2;
    }
    ip4_addr_t ip, mask, gw;
    ip4addr_aton(argv[1], &ip);
    ip4addr_aton(argv[2], &mask);
    ip4addr_aton(argv[3], &gw);
    tcpip_init(NULL, NULL);
    LOCK_TCPIP_CORE();
    netif_add(&tap, &ip, &mask, &gw, NULL, tapif_init, tcpip_input);
    netif_set_default(&tap);
    netif_set_up(&tap);
    netif_set_link_up(&tap);
    UNLOCK_TCPIP_CORE();
    name_stack_threads();

    int l = lwip_socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = lwip_htons(6379)};
    if (lwip_bind(l, (struct sockaddr *)&a, sizeof a) < 0 || lwip_listen(l, 64) < 0) {
        fprintf(stderr, "lwip-redis: cannot listen on 6379\n");
        return 1;
    }
    for (;;) {
        int s = lwip_accept(l, NULL, NULL);
        if (s < 0) continue;
        pthread_t t;
        pthread_create(&t, NULL, serve, (void *)(long)s);
        pthread_detach(t);
    }
}
