/* Bench only (bench/producer_bench.py, variant bare+cb+chdr): a librdkafka interceptor
 * that adds one constant `kaudit` header of the stamp's size (48 bytes: the bench's
 * producer id and run id) in on_send and does nothing else. It tells librdkafka's own
 * cost of carrying a header from the cost of passing one from Python (bare+cb+hdr) and
 * from everything else the kaudit plugin does (plugin). Built by the bench with gcc. */
#include <string.h>
#include <librdkafka/rdkafka.h>

#define EXPORT __attribute__((visibility("default")))
static const char VALUE[64];

static rd_kafka_resp_err_t on_send(rd_kafka_t *rk, rd_kafka_message_t *m, void *op) {
        rd_kafka_headers_t *h;
        (void)rk;
        size_t len = (size_t)(long)op;
        if (rd_kafka_message_headers(m, &h)) {
                h = rd_kafka_headers_new(1);
                rd_kafka_header_add(h, "kaudit", 6, VALUE, (ssize_t)len);
                rd_kafka_message_set_headers(m, h);
        } else
                rd_kafka_header_add(h, "kaudit", 6, VALUE, (ssize_t)len);
        return RD_KAFKA_RESP_ERR_NO_ERROR;
}

#ifdef WITH_ACK
/* bare+cb+chdr+ack: also read the header back in on_acknowledgement, as a ledger that
 * maps each stamp to its offset must: the floor of any such auditor's per-ack cost */
static volatile unsigned long seen;

static rd_kafka_resp_err_t on_ack(rd_kafka_t *rk, rd_kafka_message_t *m, void *op) {
        rd_kafka_headers_t *h;
        const void *v;
        size_t sz;
        (void)rk; (void)op;
        if (!rd_kafka_message_headers(m, &h) && !rd_kafka_header_get_last(h, "kaudit", &v, &sz))
                seen += sz + m->offset;
        return RD_KAFKA_RESP_ERR_NO_ERROR;
}
#endif

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *op,
                                  char *errstr, size_t errstr_size) {
        (void)conf; (void)errstr; (void)errstr_size;
#ifdef WITH_ACK
        rd_kafka_interceptor_add_on_acknowledgement(rk, "chdr", on_ack, op);
#endif
        return rd_kafka_interceptor_add_on_send(rk, "chdr", on_send, op);
}

static rd_kafka_resp_err_t on_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old,
                                  size_t filter_cnt, const char **filter, void *op);

static void add(rd_kafka_conf_t *conf, void *op) {
        rd_kafka_conf_interceptor_add_on_new(conf, "chdr", on_new, op);
        rd_kafka_conf_interceptor_add_on_conf_dup(conf, "chdr", on_dup, op);
}

static rd_kafka_resp_err_t on_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old,
                                  size_t filter_cnt, const char **filter, void *op) {
        (void)old; (void)filter_cnt; (void)filter;
        add(new_conf, op);
        return RD_KAFKA_RESP_ERR_NO_ERROR;
}

EXPORT rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep,
                                     char *errstr, size_t errstr_size) {
        (void)plug_opaquep; (void)errstr; (void)errstr_size;
        add(conf, (void *)(long)48);
        return RD_KAFKA_RESP_ERR_NO_ERROR;
}
