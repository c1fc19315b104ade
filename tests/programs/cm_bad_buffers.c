/* rdma_cm's device file given bad buffers and a close under a command,
 * as the kernel's ucma answers them (drivers/infiniband/core/ucma.c):
 * - fstat of a channel into a read-only page: EFAULT, not a crash;
 * - CREATE_ID, DESTROY_ID, QUERY_ROUTE, INIT_QP_ATTR and GET_EVENT with
 *   `out` below their response: ENOSPC, and no byte written;
 * - CREATE_ID whose response cannot be written: EFAULT, and the id made
 *   is destroyed (the ids between two good CREATE_IDs are unknown);
 * - JOIN_IP_MCAST likewise: EFAULT, and the group is left (its
 *   MULTICAST_JOIN event goes with it: the next event is the next
 *   join's);
 * - MIGRATE_ID from a descriptor that is not open: ENOENT; from one that
 *   is no rdma_cm file: EINVAL;
 * - a command at the end of a mapping, written with a `count` beyond
 *   it: only its header and `in` bytes are read, and it works;
 * - a thread making ids while another closes the channel: each write
 *   returns (success or EBADF), none waits for ever.
 * Commands are written as librdmacm writes them. Prints "cm bad buffers
 * ok". Found by adversarial testing (2026-12-06). Usage: cm_bad_buffers
 * IP (the device's address, for the joins). */
#include <rdma/rdma_user_cm.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* rdma_cma.h's number (that header and this one cannot both be included). */
enum { MULTICAST_JOIN_EVENT = 12 };

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

struct create_cmd {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_create_id body;
};

/* CREATE_ID on `fd` answering into `resp` with room `out`: write's
 * result, errno in `err`. */
static long create_id(int fd, void *resp, int out, int *err)
{
	struct create_cmd c = { .hdr = { RDMA_USER_CM_CMD_CREATE_ID, sizeof(c.body), out } };
	c.body.response = (uintptr_t)resp;
	c.body.ps = RDMA_PS_TCP;
	long n = write(fd, &c, sizeof(c));
	*err = errno;
	return n;
}

/* A command of `cmd` on id `id` whose body is `struct rdma_ucm_query`
 * or its like (response, id, then a word), answering into `resp`. */
static long id_cmd(int fd, __u32 cmd, __u32 id, __u32 word, void *resp, int out, int *err)
{
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		__u64 response;
		__u32 id, word;
	} c = { { cmd, 16, out }, (uintptr_t)resp, id, word };
	long n = write(fd, &c, sizeof(c));
	*err = errno;
	return n;
}

/* A UD id on `fd`, bound to `ip`: its handle. */
static __u32 bound_ud_id(int fd, const char *ip)
{
	__u32 id;
	struct create_cmd c = { .hdr = { RDMA_USER_CM_CMD_CREATE_ID, sizeof(c.body), 4 } };
	c.body.response = (uintptr_t)&id;
	c.body.ps = RDMA_PS_UDP;
	if (write(fd, &c, sizeof(c)) < 0)
		FAIL("CREATE_ID (UD): %s", strerror(errno));
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_bind_ip body;
	} b = { { RDMA_USER_CM_CMD_BIND_IP, sizeof(b.body), 0 } };
	struct sockaddr_in *sin = (struct sockaddr_in *)&b.body.addr;
	sin->sin_family = AF_INET;
	if (inet_pton(AF_INET, ip, &sin->sin_addr) != 1)
		FAIL("bad address %s", ip);
	b.body.id = id;
	if (write(fd, &b, sizeof(b)) < 0)
		FAIL("BIND_IP %s: %s", ip, strerror(errno));
	return id;
}

/* JOIN_IP_MCAST of id `id` to 239.1.2.3, tagged `uid`, answering into
 * `resp`: write's result, errno in `err`. */
static long join(int fd, __u32 id, __u64 uid, void *resp, int *err)
{
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_join_ip_mcast body;
	} j = { { RDMA_USER_CM_CMD_JOIN_IP_MCAST, sizeof(j.body), 4 } };
	struct sockaddr_in *sin = (struct sockaddr_in *)&j.body.addr;
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(0xEF010203);
	j.body.response = (uintptr_t)resp;
	j.body.uid = uid;
	j.body.id = id;
	long n = write(fd, &j, sizeof(j));
	*err = errno;
	return n;
}

/* GET_EVENT on `fd` into `ev`: write's result, errno in `err`. */
static long get_event(int fd, struct rdma_ucm_event_resp *ev, int *err)
{
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_get_event body;
	} ge = { { RDMA_USER_CM_CMD_GET_EVENT, sizeof(ge.body), sizeof(*ev) }, { (uintptr_t)ev } };
	long n = write(fd, &ge, sizeof(ge));
	*err = errno;
	return n;
}

static void expect_enospc(const char *what, long n, int err, const unsigned char *canary)
{
	if (n != -1 || err != ENOSPC)
		FAIL("%s with too little room: %ld, errno %d, want ENOSPC", what, n, err);
	for (int i = 0; i < 512; i++)
		if (canary[i] != 0xA5)
			FAIL("%s with too little room wrote byte %d", what, i);
}

/* Ids the racing thread has made. */
static atomic_int made;

static void *make_ids(void *arg)
{
	int fd = *(int *)arg, err;
	__u32 handle;
	for (int i = 0; i < 100000; i++) {
		long n = create_id(fd, &handle, 4, &err);
		if (n >= 0)
			atomic_fetch_add(&made, 1);
		if (n < 0 && err == EBADF)
			return NULL;
		if (n < 0)
			FAIL("CREATE_ID racing the close: errno %d", err);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		FAIL("usage: cm_bad_buffers IP");
	int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		FAIL("open: %s", strerror(errno));
	unsigned char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ro == MAP_FAILED)
		FAIL("mmap");

	if (fstat(fd, (struct stat *)ro) != -1 || errno != EFAULT)
		FAIL("fstat into a read-only page: want EFAULT, errno %d", errno);

	unsigned char canary[512];
	int err;
	memset(canary, 0xA5, sizeof(canary));
	/* Each call first, then its errno: C leaves the order of a call's
	 * arguments open. */
	long n = create_id(fd, canary, 2, &err);
	expect_enospc("CREATE_ID", n, err, canary);
	__u32 a, b;
	if (create_id(fd, &a, 4, &err) < 0)
		FAIL("CREATE_ID: errno %d", err);
	n = id_cmd(fd, RDMA_USER_CM_CMD_DESTROY_ID, a, 0, canary, 0, &err);
	expect_enospc("DESTROY_ID", n, err, canary);
	n = id_cmd(fd, RDMA_USER_CM_CMD_QUERY_ROUTE, a, 0, canary, 1, &err);
	expect_enospc("QUERY_ROUTE", n, err, canary);
	n = id_cmd(fd, RDMA_USER_CM_CMD_INIT_QP_ATTR, a, 0, canary, 1, &err);
	expect_enospc("INIT_QP_ATTR", n, err, canary);
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_get_event body;
	} ge = { { RDMA_USER_CM_CMD_GET_EVENT, sizeof(ge.body), 100 }, { (uintptr_t)canary } };
	n = write(fd, &ge, sizeof(ge));
	expect_enospc("GET_EVENT", n, errno, canary);

	for (int i = 0; i < 100; i++)
		if (create_id(fd, ro, 4, &err) != -1 || err != EFAULT)
			FAIL("CREATE_ID into a read-only page: want EFAULT, errno %d", err);
	if (create_id(fd, &b, 4, &err) < 0)
		FAIL("CREATE_ID: errno %d", err);
	for (__u32 h = a + 1; h < b; h++)
		if (id_cmd(fd, RDMA_USER_CM_CMD_DESTROY_ID, h, 0, canary, 4, &err) != -1 ||
		    err != ENOENT)
			FAIL("id %u, made by a CREATE_ID that failed, is still there", h);

	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	n = id_cmd(fd, RDMA_USER_CM_CMD_MIGRATE_ID, b, (__u32)-1, canary, 4, &err);
	if (n != -1 || err != ENOENT)
		FAIL("MIGRATE_ID from descriptor -1: %ld, errno %d, want ENOENT", n, err);
	n = id_cmd(fd, RDMA_USER_CM_CMD_MIGRATE_ID, b, null, canary, 4, &err);
	if (n != -1 || err != EINVAL)
		FAIL("MIGRATE_ID from /dev/null: %ld, errno %d, want EINVAL", n, err);

	/* A CREATE_ID ending where the mapping does, written with a count
	 * of a page. */
	unsigned char *two = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
	if (two == MAP_FAILED || mprotect(two + 4096, 4096, PROT_NONE))
		FAIL("mmap");
	struct create_cmd *at_end = (struct create_cmd *)(two + 4096 - sizeof(struct create_cmd));
	__u32 c;
	*at_end = (struct create_cmd){ { RDMA_USER_CM_CMD_CREATE_ID, sizeof(at_end->body), 4 } };
	at_end->body.response = (uintptr_t)&c;
	at_end->body.ps = RDMA_PS_TCP;
	n = write(fd, at_end, 4096);
	if (n != 4096)
		FAIL("a CREATE_ID at the end of a mapping, count 4096: %ld, errno %d", n, errno);

	/* A join whose answer cannot be written is left: of its join and
	 * the next one, only the next one's event is there. */
	int joins = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (joins < 0)
		FAIL("open: %s", strerror(errno));
	__u32 ud = bound_ud_id(joins, argv[1]), mc;
	n = join(joins, ud, 1, ro, &err);
	if (n != -1 || err != EFAULT)
		FAIL("JOIN_IP_MCAST into a read-only page: %ld, errno %d, want EFAULT", n, err);
	if (join(joins, ud, 2, &mc, &err) < 0)
		FAIL("JOIN_IP_MCAST: errno %d", err);
	struct rdma_ucm_event_resp ev;
	if (get_event(joins, &ev, &err) < 0)
		FAIL("GET_EVENT after the joins: errno %d", err);
	if (ev.event != MULTICAST_JOIN_EVENT || ev.uid != 2)
		FAIL("the first event: %u for uid %llu, want MULTICAST_JOIN (%d) for uid 2",
		     ev.event, (unsigned long long)ev.uid, MULTICAST_JOIN_EVENT);
	n = get_event(joins, &ev, &err);
	if (n != -1 || err != EAGAIN)
		FAIL("a second event (%u for uid %llu): the failed join's was kept", ev.event,
		     (unsigned long long)ev.uid);
	close(joins);

	/* Ids made while another thread closes the channel. */
	for (int round = 0; round < 20; round++) {
		int ch = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
		if (ch < 0)
			FAIL("open: %s", strerror(errno));
		pthread_t t;
		atomic_store(&made, 0);
		pthread_create(&t, NULL, make_ids, &ch);
		/* Closed once the thread is making ids, a little later each
		 * round. */
		while (atomic_load(&made) < 1 + 5 * round)
			;
		close(ch);
		pthread_join(t, NULL); /* the case's time-out catches a hang */
	}
	puts("cm bad buffers ok");
	return 0;
}
