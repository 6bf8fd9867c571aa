/* kafka_ordered._speedups: C versions of the key hashes and of the
 * fixed-layout key -> partition function (the per-record path).
 *
 * Every function keeps the GIL: hashing a short key takes nanoseconds, far
 * less than a GIL hand-over, which with any busy Python thread costs a
 * switch interval (5 ms by default) per call.
 *
 * Values are those of kafka_ordered._hashing's pure-Python fallback:
 *   murmur2: Kafka's Java Utils.murmur2 (seed 0x9747b28c) & 0x7fffffff
 *   murmur3: MurmurHash3 x86_32, seed 0, & 0x7fffffff (mmh3.hash(k) & 0x7fffffff)
 *   crc32:   the unsigned CRC-32 of zlib.crc32
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_PYSSIZET, READONLY (Py_T_* only from 3.12) */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <dlfcn.h>

#define MASK31 0x7fffffffu

/* The interface kafka_ordered._hashing checks (_hashing.SPEEDUPS_API). */
#define SPEEDUPS_API 5

/* Little-endian 32-bit load from any alignment; compilers turn this into a
 * single load on little-endian machines. */
static inline uint32_t
load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint32_t
rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

/* Kafka's org.apache.kafka.common.utils.Utils.murmur2, made positive. Java
 * takes the length as an int; keys of 2 GiB and more cannot exist there. */
static uint32_t
murmur2_hash(const unsigned char *data, Py_ssize_t len)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    Py_ssize_t nblocks = len >> 2, i;
    const unsigned char *tail = data + (nblocks << 2);

    for (i = 0; i < nblocks; i++) {
        uint32_t k = load_le32(data + (i << 2));
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (len & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h & MASK31;
}

/* MurmurHash3_x86_32 with seed 0, made positive. */
static uint32_t
murmur3_hash(const unsigned char *data, Py_ssize_t len)
{
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    uint32_t h = 0, k;
    Py_ssize_t nblocks = len >> 2, i;
    const unsigned char *tail = data + (nblocks << 2);

    for (i = 0; i < nblocks; i++) {
        k = load_le32(data + (i << 2));
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = rotl32(h, 13);
        h = h * 5 + 0xe6546b64u;
    }
    k = 0;
    switch (len & 3) {
    case 3:
        k ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        k ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h & MASK31;
}

/* zlib's CRC-32 (reflected polynomial 0xedb88320), one table lookup per byte:
 * keys are short, so a wider slicing table would not pay for its cache lines. */
static uint32_t crc_table[256];

static void
crc32_init(void)
{
    uint32_t n, c;
    int k;
    for (n = 0; n < 256; n++) {
        c = n;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t
crc32_hash(const unsigned char *data, Py_ssize_t len)
{
    uint32_t c = 0xffffffffu;
    Py_ssize_t i;
    for (i = 0; i < len; i++)
        c = crc_table[(c ^ data[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

typedef uint32_t (*hash_fn)(const unsigned char *, Py_ssize_t);

static const struct {
    const char *name;
    hash_fn fn;
} HASHES[] = {{"murmur2", murmur2_hash}, {"murmur3", murmur3_hash}, {"crc32", crc32_hash}};

#define NHASHES ((int)(sizeof(HASHES) / sizeof(HASHES[0])))

/* Hash `key`: bytes directly, otherwise any C-contiguous buffer. Returns 0 on
 * success, -1 with TypeError set for other objects (str included: Kafka
 * clients hash encoded bytes, and the encoding is the caller's choice). */
static int
hash_object(hash_fn fn, PyObject *key, uint32_t *out)
{
    Py_buffer view;
    if (PyBytes_Check(key)) {
        *out = fn((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        return 0;
    }
    if (!PyObject_CheckBuffer(key)) {
        PyErr_Format(PyExc_TypeError, "key must be bytes, got %.200s", Py_TYPE(key)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(key, &view, PyBUF_SIMPLE) < 0)
        return -1;
    *out = fn((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return 0;
}

static PyObject *
py_murmur2(PyObject *module, PyObject *key)
{
    uint32_t h;
    if (hash_object(murmur2_hash, key, &h) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(h);
}

static PyObject *
py_murmur3(PyObject *module, PyObject *key)
{
    uint32_t h;
    if (hash_object(murmur3_hash, key, &h) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(h);
}

static PyObject *
py_crc32(PyObject *module, PyObject *key)
{
    uint32_t h;
    if (hash_object(crc32_hash, key, &h) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(h);
}

/* ---- LinearPartitioner ------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* found through tp_vectorcall_offset */
    hash_fn fn;
    int hash_index;
    Py_ssize_t initial, partitions;
    /* h < 2**32 and m2 <= 2 * PY_SSIZE_T_MAX, so uint64 never overflows */
    uint64_t m, m2, split;
    PyObject *coerce; /* callable for keys that are not exactly bytes, or NULL */
} LinearPartitioner;

static inline PyObject *
lp_bucket(LinearPartitioner *self, uint32_t h)
{
    uint64_t b = h % self->m;
    if (b < self->split)
        b = h % self->m2;
    return PyLong_FromSsize_t((Py_ssize_t)b);
}

/* Keys that are not exactly bytes: through `coerce` when given (its result
 * must be bytes), else any contiguous buffer. */
static PyObject *
lp_slow(LinearPartitioner *self, PyObject *key)
{
    uint32_t h;
    PyObject *converted;
    if (self->coerce == NULL) {
        if (hash_object(self->fn, key, &h) < 0)
            return NULL;
        return lp_bucket(self, h);
    }
    converted = PyObject_CallOneArg(self->coerce, key);
    if (converted == NULL)
        return NULL;
    if (!PyBytes_Check(converted)) {
        PyErr_Format(PyExc_TypeError, "coerce must return bytes, got %.200s", Py_TYPE(converted)->tp_name);
        Py_DECREF(converted);
        return NULL;
    }
    h = self->fn((const unsigned char *)PyBytes_AS_STRING(converted), PyBytes_GET_SIZE(converted));
    Py_DECREF(converted);
    return lp_bucket(self, h);
}

static PyObject *
lp_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LinearPartitioner *self = (LinearPartitioner *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *key;
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "LinearPartitioner takes exactly one positional argument (key: bytes), got %zd",
                     nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0));
        return NULL;
    }
    key = args[0];
    if (PyBytes_CheckExact(key))
        return lp_bucket(self, self->fn((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)));
    return lp_slow(self, key);
}

static PyObject *
lp_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"hash_name", "initial", "partitions", "coerce", NULL};
    const char *name;
    Py_ssize_t initial, partitions;
    PyObject *coerce = Py_None;
    LinearPartitioner *self;
    uint64_t m;
    int i, index = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "snn|O:LinearPartitioner", kwlist, &name, &initial, &partitions,
                                     &coerce))
        return NULL;
    for (i = 0; i < NHASHES; i++)
        if (strcmp(name, HASHES[i].name) == 0)
            index = i;
    if (index < 0) {
        PyErr_Format(PyExc_ValueError, "unknown hash '%.100s': expected murmur2, murmur3 or crc32", name);
        return NULL;
    }
    if (initial < 1 || partitions < initial) {
        PyErr_Format(PyExc_ValueError, "need 1 <= initial <= partitions, got initial=%zd partitions=%zd", initial,
                     partitions);
        return NULL;
    }
    if (coerce != Py_None && !PyCallable_Check(coerce)) {
        PyErr_SetString(PyExc_TypeError, "coerce must be callable or None");
        return NULL;
    }
    self = (LinearPartitioner *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    /* m = initial * 2**L for the largest L with m <= partitions */
    m = (uint64_t)initial;
    while (m <= (uint64_t)partitions / 2)
        m <<= 1;
    self->vectorcall = lp_vectorcall;
    self->fn = HASHES[index].fn;
    self->hash_index = index;
    self->initial = initial;
    self->partitions = partitions;
    self->m = m;
    self->m2 = m << 1;
    self->split = (uint64_t)partitions - m;
    self->coerce = coerce == Py_None ? NULL : Py_NewRef(coerce);
    return (PyObject *)self;
}

static int
lp_traverse(LinearPartitioner *self, visitproc visit, void *arg)
{
    Py_VISIT(self->coerce);
    return 0;
}

static int
lp_clear(LinearPartitioner *self)
{
    Py_CLEAR(self->coerce);
    return 0;
}

static void
lp_dealloc(LinearPartitioner *self)
{
    PyObject_GC_UnTrack(self);
    lp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
lp_repr(LinearPartitioner *self)
{
    return PyUnicode_FromFormat("LinearPartitioner('%s', %zd, %zd)", HASHES[self->hash_index].name, self->initial,
                                self->partitions);
}

/* Pickles (and cloudpickles, for Spark) as its constructor call. */
static PyObject *
lp_reduce(LinearPartitioner *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(O(snnO))", (PyObject *)Py_TYPE(self), HASHES[self->hash_index].name, self->initial,
                         self->partitions, self->coerce ? self->coerce : Py_None);
}

static PyObject *
lp_get_hash_name(LinearPartitioner *self, void *closure)
{
    return PyUnicode_FromString(HASHES[self->hash_index].name);
}

static PyMethodDef lp_methods[] = {
    {"__reduce__", (PyCFunction)lp_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef lp_members[] = {
    {"initial", T_PYSSIZET, offsetof(LinearPartitioner, initial), READONLY, "initial partition count (N0)"},
    {"partitions", T_PYSSIZET, offsetof(LinearPartitioner, partitions), READONLY, "undeleted partition count (N)"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(LinearPartitioner, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef lp_getset[] = {
    {"hash_name", (getter)lp_get_hash_name, NULL, "murmur2, murmur3 or crc32", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(lp_doc,
             "LinearPartitioner(hash_name, initial, partitions, coerce=None)\n--\n\n"
             "Callable key -> partition under linear hashing with fixed counts: with\n"
             "m = initial * 2**L (largest L with m <= partitions) and h the positive hash,\n"
             "b = h % m, and h % (2 * m) when b < partitions - m.\n\n"
             "Keys of type bytes take the fast path. Other keys go through coerce(key),\n"
             "which must return bytes or raise; without coerce any contiguous buffer is\n"
             "hashed and other types raise TypeError.");

static PyTypeObject LinearPartitionerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_ordered._speedups.LinearPartitioner",
    .tp_basicsize = sizeof(LinearPartitioner),
    .tp_dealloc = (destructor)lp_dealloc,
    .tp_vectorcall_offset = offsetof(LinearPartitioner, vectorcall),
    .tp_repr = (reprfunc)lp_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = lp_doc,
    .tp_traverse = (traverseproc)lp_traverse,
    .tp_clear = (inquiry)lp_clear,
    .tp_methods = lp_methods,
    .tp_members = lp_members,
    .tp_getset = lp_getset,
    .tp_new = lp_new,
};

/* ---- the producer's per-record path -------------------------------------- */

/* ProducerRoute: one managed topic's state as the per-record path reads it.
 * The registering core (kafka_ordered._registering) owns it: it sets `ready`
 * when keyed records may go straight out (registered for the current layout,
 * no switch running, nothing buffered) and `fn` to the layout's key ->
 * partition function; `stamp` holds partitions whose records must take the
 * slow path (empty in the steady state). `inflight` counts senders between
 * their `ready` check and the return of the inner client's call (FastProduce
 * itself, Python paths through enter()/leave()): a core that clears `ready`
 * waits for it to reach 0 before it relies on nothing more being enqueued
 * under the old layout. */
typedef struct {
    PyObject_HEAD
    char ready;
    Py_ssize_t inflight;
    PyObject *fn;
    PyObject *stamp;
} ProducerRoute;

static PyTypeObject ProducerRouteType;

static PyObject *
pr_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", NULL};
    PyObject *fn = Py_None;
    ProducerRoute *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:ProducerRoute", kwlist, &fn))
        return NULL;
    self = (ProducerRoute *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->stamp = PySet_New(NULL);
    if (self->stamp == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->fn = Py_NewRef(fn);
    return (PyObject *)self;
}

static int
pr_traverse(ProducerRoute *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->stamp);
    return 0;
}

static int
pr_clear(ProducerRoute *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->stamp);
    return 0;
}

static void
pr_dealloc(ProducerRoute *self)
{
    PyObject_GC_UnTrack(self);
    pr_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
pr_get_ready(ProducerRoute *self, void *closure)
{
    return PyBool_FromLong(self->ready);
}

static int
pr_set_ready(ProducerRoute *self, PyObject *value, void *closure)
{
    int v;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete ready");
        return -1;
    }
    v = PyObject_IsTrue(value);
    if (v < 0)
        return -1;
    self->ready = (char)v;
    return 0;
}

static PyObject *
pr_get_fn(ProducerRoute *self, void *closure)
{
    return Py_NewRef(self->fn ? self->fn : Py_None);
}

static int
pr_set_fn(ProducerRoute *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete fn");
        return -1;
    }
    {
        PyObject *old = self->fn;
        self->fn = Py_NewRef(value);
        Py_XDECREF(old);
    }
    return 0;
}

static PyObject *
pr_repr(ProducerRoute *self)
{
    return PyUnicode_FromFormat("ProducerRoute(ready=%s, fn=%R, stamp=%R, inflight=%zd)",
                                self->ready ? "True" : "False", self->fn ? self->fn : Py_None, self->stamp,
                                self->inflight);
}

static PyObject *
pr_enter(ProducerRoute *self, PyObject *Py_UNUSED(ignored))
{
    self->inflight++;
    return PyBool_FromLong(self->ready);
}

static PyObject *
pr_leave(ProducerRoute *self, PyObject *Py_UNUSED(ignored))
{
    if (self->inflight <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "ProducerRoute.leave() without enter()");
        return NULL;
    }
    self->inflight--;
    Py_RETURN_NONE;
}

static PyMethodDef pr_methods[] = {
    {"enter", (PyCFunction)pr_enter, METH_NOARGS,
     "enter($self, /)\n--\n\nCount a sender in (before it checks ready); returns ready."},
    {"leave", (PyCFunction)pr_leave, METH_NOARGS,
     "leave($self, /)\n--\n\nCount a sender out (after its inner call returned)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pr_members[] = {
    {"stamp", T_OBJECT_EX, offsetof(ProducerRoute, stamp), READONLY,
     "set of partitions whose keyed records take the slow path (empty in the steady state)"},
    {"inflight", T_PYSSIZET, offsetof(ProducerRoute, inflight), READONLY,
     "senders past their ready check whose inner call has not returned"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef pr_getset[] = {
    {"ready", (getter)pr_get_ready, (setter)pr_set_ready, "keyed records may go straight out", NULL},
    {"fn", (getter)pr_get_fn, (setter)pr_set_fn, "key (bytes) -> partition of the current layout", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(pr_doc, "ProducerRoute(fn=None)\n--\n\n"
                     "A managed topic's per-record state: ready, fn, stamp (a set), inflight.");

static PyTypeObject ProducerRouteType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_ordered._speedups.ProducerRoute",
    .tp_basicsize = sizeof(ProducerRoute),
    .tp_dealloc = (destructor)pr_dealloc,
    .tp_repr = (reprfunc)pr_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = pr_doc,
    .tp_traverse = (traverseproc)pr_traverse,
    .tp_clear = (inquiry)pr_clear,
    .tp_methods = pr_methods,
    .tp_members = pr_members,
    .tp_getset = pr_getset,
    .tp_new = pr_new,
};

/* FastProduce(produce, slow, routes): the per-record path of OrderedProducer.
 *
 * Called like confluent_kafka.Producer.produce. The common case -- a str
 * topic whose route in `routes` is ready, a bytes or str key, value and
 * key positional or as keywords, maybe on_delivery/callback, timestamp,
 * headers, partition=-1 as keywords -- computes the partition (inline for a
 * LinearPartitioner) and calls produce(topic, value, key, partition[,
 * callback][, timestamp=..., headers=...]) through vectorcall.
 * Every other call, and a key whose partition is in the route's `stamp`,
 * goes to slow(...) with the arguments unchanged. Nothing between the ready
 * check and the inner call runs Python code or releases the GIL, and
 * `inflight` covers the inner call in case it does. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *produce;
    PyObject *slow;
    PyObject *routes;
    /* The last topic looked up and its route (strong references): callers
     * pass the same str object over and over. A route is never replaced in
     * `routes` once set (the core creates it with the topic's state). */
    PyObject *last_topic, *last_route;
    PyObject *weakrefs;
} FastProduce;

static PyObject *KW_TOPIC, *KW_VALUE, *KW_KEY, *KW_ON_DELIVERY, *KW_CALLBACK, *KW_PARTITION, *KW_TIMESTAMP, *KW_HEADERS;
static PyObject *KWN_TIMESTAMP, *KWN_HEADERS, *KWN_BOTH; /* kwnames tuples for the inner call */

/* partition=-1: "not set" */
static int
is_minus_one(PyObject *v)
{
    int overflow;
    return PyLong_CheckExact(v) && PyLong_AsLongAndOverflow(v, &overflow) == -1 && !overflow;
}

static int
kw_is(PyObject *name, PyObject *interned)
{
    return name == interned || (PyUnicode_Check(name) && PyUnicode_Compare(name, interned) == 0);
}

static PyObject *
fp_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastProduce *self = (FastProduce *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, i, len;
    PyObject *topic = NULL, *value = Py_None, *key = NULL, *cb = NULL, *cb2 = NULL, *ts = NULL, *hdrs = NULL;
    PyObject *route, *part, *res, *kwn;
    PyObject *call[8];
    Py_ssize_t n;
    const char *data;
    ProducerRoute *r;

    /* produce(topic, value, key, partition, on_delivery, timestamp, headers, *, callback) */
    if (nargs > 7)
        goto slow;
    topic = nargs > 0 ? args[0] : NULL;
    if (nargs > 1)
        value = args[1];
    if (nargs > 2)
        key = args[2];
    if (nargs > 3 && !is_minus_one(args[3]))
        goto slow;
    if (nargs > 4)
        cb = args[4];
    if (nargs > 5)
        ts = args[5];
    if (nargs > 6)
        hdrs = args[6];
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (kw_is(name, KW_KEY) && nargs < 3)
            key = v;
        else if (kw_is(name, KW_TOPIC) && nargs < 1)
            topic = v;
        else if (kw_is(name, KW_VALUE) && nargs < 2)
            value = v;
        else if (kw_is(name, KW_ON_DELIVERY) && nargs < 5)
            cb = v;
        else if (kw_is(name, KW_CALLBACK))
            cb2 = v;
        else if (kw_is(name, KW_TIMESTAMP) && nargs < 6)
            ts = v;
        else if (kw_is(name, KW_HEADERS) && nargs < 7)
            hdrs = v;
        else if (kw_is(name, KW_PARTITION) && nargs < 4) {
            if (!is_minus_one(v)) /* anything but "not set" is the slow path's to judge */
                goto slow;
        }
        else
            goto slow;
    }
    if (key == NULL || topic == NULL || !PyUnicode_CheckExact(topic))
        goto slow;
    if (PyBytes_CheckExact(key)) {
        data = PyBytes_AS_STRING(key);
        len = PyBytes_GET_SIZE(key);
    }
    else if (PyUnicode_CheckExact(key)) {
        data = PyUnicode_AsUTF8AndSize(key, &len); /* what the client sends */
        if (data == NULL) {
            PyErr_Clear();
            goto slow;
        }
    }
    else
        goto slow;
    if (topic == self->last_topic)
        route = self->last_route;
    else {
        route = PyDict_GetItemWithError(self->routes, topic);
        if (route == NULL) {
            if (PyErr_Occurred())
                return NULL;
            goto slow;
        }
        if (!Py_IS_TYPE(route, &ProducerRouteType))
            goto slow;
        Py_INCREF(topic);
        Py_INCREF(route);
        Py_XDECREF(self->last_topic);
        Py_XDECREF(self->last_route);
        self->last_topic = topic;
        self->last_route = route;
    }
    r = (ProducerRoute *)Py_NewRef(route);
    r->inflight++;
    if (!r->ready || r->fn == NULL || !Py_IS_TYPE(r->fn, &LinearPartitionerType))
        goto route_slow;
    {
        LinearPartitioner *lp = (LinearPartitioner *)r->fn;
        part = lp_bucket(lp, lp->fn((const unsigned char *)data, len));
    }
    if (part == NULL)
        goto route_error;
    if (PySet_GET_SIZE(r->stamp) > 0) {
        int c = PySet_Contains(r->stamp, part);
        if (c != 0) {
            Py_DECREF(part);
            if (c < 0)
                goto route_error;
            goto route_slow;
        }
    }
    if (cb == NULL || cb == Py_None)
        cb = cb2 == Py_None ? NULL : cb2;
    call[1] = topic;
    call[2] = value;
    call[3] = key;
    call[4] = part;
    n = 4;
    kwn = NULL;
    if (ts != NULL || hdrs != NULL) {
        call[5] = cb ? cb : Py_None;
        n = 5;
        if (ts != NULL)
            call[1 + n++] = ts;
        if (hdrs != NULL)
            call[1 + n++] = hdrs;
        kwn = ts == NULL ? KWN_HEADERS : hdrs == NULL ? KWN_TIMESTAMP : KWN_BOTH;
        n -= PyTuple_GET_SIZE(kwn);
    }
    else if (cb != NULL)
        call[1 + n++] = cb;
    res = PyObject_Vectorcall(self->produce, call + 1, (size_t)n | PY_VECTORCALL_ARGUMENTS_OFFSET, kwn);
    Py_DECREF(part);
    r->inflight--;
    Py_DECREF(r);
    return res;

route_error:
    r->inflight--;
    Py_DECREF(r);
    return NULL;
route_slow:
    r->inflight--;
    Py_DECREF(r);
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
fp_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"produce", "slow", "routes", NULL};
    PyObject *produce, *slow, *routes;
    FastProduce *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!:FastProduce", kwlist, &produce, &slow, &PyDict_Type, &routes))
        return NULL;
    if (!PyCallable_Check(produce) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "produce and slow must be callable");
        return NULL;
    }
    self = (FastProduce *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = fp_vectorcall;
    self->produce = Py_NewRef(produce);
    self->slow = Py_NewRef(slow);
    self->routes = Py_NewRef(routes);
    return (PyObject *)self;
}

static int
fp_traverse(FastProduce *self, visitproc visit, void *arg)
{
    Py_VISIT(self->produce);
    Py_VISIT(self->slow);
    Py_VISIT(self->routes);
    Py_VISIT(self->last_route);
    return 0;
}

static int
fp_clear(FastProduce *self)
{
    Py_CLEAR(self->produce);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->routes);
    Py_CLEAR(self->last_topic);
    Py_CLEAR(self->last_route);
    return 0;
}

static void
fp_dealloc(FastProduce *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    fp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fp_get_doc(FastProduce *self, void *closure)
{
    return PyObject_GetAttrString(self->slow, "__doc__");
}

static PyMemberDef fp_members[] = {
    /* inspect.signature() follows __wrapped__: the slow path has the signature */
    {"__wrapped__", T_OBJECT_EX, offsetof(FastProduce, slow), READONLY, NULL},
    {"routes", T_OBJECT_EX, offsetof(FastProduce, routes), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastProduce, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef fp_getset[] = {
    {"__doc__", (getter)fp_get_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastProduceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_ordered._speedups.FastProduce",
    .tp_basicsize = sizeof(FastProduce),
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_vectorcall_offset = offsetof(FastProduce, vectorcall),
    .tp_weaklistoffset = offsetof(FastProduce, weakrefs),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)fp_traverse,
    .tp_clear = (inquiry)fp_clear,
    .tp_members = fp_members,
    .tp_getset = fp_getset,
    .tp_new = fp_new,
};

/* ---- Method: a class attribute that calls a per-instance implementation ---
 *
 * Method(function, attr): placed in a class in place of `function` (a plain
 * method, whose signature and docstring it shows through __wrapped__), it
 * calls getattr(self, attr)(*args, **kwargs) -- for OrderedProducer.produce,
 * the instance's FastProduce -- without a Python frame and without the
 * interpreter's slow path for an attribute that shadows a method on each
 * instance: as a method descriptor, `obj.method(...)` reaches vectorcall
 * with self as the first argument. The last instance's implementation is
 * remembered (weakly), so `attr` must not be rebound on an instance after
 * its first call. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *function;
    PyObject *attr;
    PyObject *dict; /* __doc__, __name__, ... copied from function */
    /* The last instance and its implementation, both held weakly (the
     * implementation refers back to the instance: a strong reference here
     * would keep the last instance, and its client, alive). */
    PyObject *cached_obj_ref;
    PyObject *cached_impl_ref;
} Method;

/* The object a weak reference points to (borrowed), or NULL when dead. */
static PyObject *
weak_target(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(ref, &obj) <= 0)
        return NULL;
    Py_DECREF(obj); /* still referenced by the caller's frame */
    return obj;
#else
    PyObject *obj = PyWeakref_GET_OBJECT(ref);
    return obj == Py_None ? NULL : obj;
#endif
}

static PyObject *
method_impl(Method *self, PyObject *obj)
{
    PyObject *impl, *obj_ref, *impl_ref;
    if (self->cached_obj_ref != NULL && weak_target(self->cached_obj_ref) == obj) {
        impl = weak_target(self->cached_impl_ref);
        if (impl != NULL)
            return Py_NewRef(impl);
    }
    impl = PyObject_GetAttr(obj, self->attr);
    if (impl == NULL)
        return NULL;
    obj_ref = PyWeakref_NewRef(obj, NULL);
    impl_ref = obj_ref == NULL ? NULL : PyWeakref_NewRef(impl, NULL);
    if (impl_ref == NULL) { /* not weakly referenceable: no cache */
        PyErr_Clear();
        Py_XDECREF(obj_ref);
        return impl;
    }
    Py_XSETREF(self->cached_obj_ref, obj_ref);
    Py_XSETREF(self->cached_impl_ref, impl_ref);
    return impl;
}

static PyObject *
method_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Method *self = (Method *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *impl, *res;
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%R needs its instance as the first argument", self->function);
        return NULL;
    }
    impl = method_impl(self, args[0]);
    if (impl == NULL)
        return NULL;
    res = PyObject_Vectorcall(impl, args + 1, (size_t)(nargs - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
    Py_DECREF(impl);
    return res;
}

static PyObject *
method_descr_get(PyObject *op, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(op);
    return method_impl((Method *)op, obj);
}

static PyObject *
method_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"function", "attr", NULL};
    PyObject *function, *attr, *fdict;
    Method *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OU:Method", kwlist, &function, &attr))
        return NULL;
    if (!PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "function must be callable");
        return NULL;
    }
    self = (Method *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = method_vectorcall;
    self->function = Py_NewRef(function);
    self->attr = Py_NewRef(attr);
    PyUnicode_InternInPlace(&self->attr);
    self->dict = PyDict_New();
    if (self->dict == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    /* functools.update_wrapper's attributes, so help() and inspect see the method */
    {
        static const char *names[] = {"__module__", "__name__", "__qualname__", "__doc__", NULL};
        int i;
        for (i = 0; names[i] != NULL; i++) {
            PyObject *v = PyObject_GetAttrString(function, names[i]);
            if (v == NULL) {
                PyErr_Clear();
                continue;
            }
            if (PyDict_SetItemString(self->dict, names[i], v) < 0) {
                Py_DECREF(v);
                Py_DECREF(self);
                return NULL;
            }
            Py_DECREF(v);
        }
        fdict = PyObject_GetAttrString(function, "__dict__");
        if (fdict == NULL)
            PyErr_Clear();
        else {
            if (PyDict_Check(fdict) && PyDict_Update(self->dict, fdict) < 0) {
                Py_DECREF(fdict);
                Py_DECREF(self);
                return NULL;
            }
            Py_DECREF(fdict);
        }
        if (PyDict_SetItemString(self->dict, "__wrapped__", function) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static int
method_traverse(Method *self, visitproc visit, void *arg)
{
    Py_VISIT(self->function);
    Py_VISIT(self->attr);
    Py_VISIT(self->dict);
    Py_VISIT(self->cached_obj_ref);
    Py_VISIT(self->cached_impl_ref);
    return 0;
}

static int
method_clear(Method *self)
{
    Py_CLEAR(self->function);
    Py_CLEAR(self->attr);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->cached_obj_ref);
    Py_CLEAR(self->cached_impl_ref);
    return 0;
}

static void
method_dealloc(Method *self)
{
    PyObject_GC_UnTrack(self);
    method_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
method_repr(Method *self)
{
    return PyUnicode_FromFormat("<method %R through instance attribute %R>", self->function, self->attr);
}

static PyMemberDef method_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Method, vectorcall), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(Method, dict), READONLY, NULL},
    {"attr", T_OBJECT_EX, offsetof(Method, attr), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_ordered._speedups.Method",
    .tp_basicsize = sizeof(Method),
    .tp_dealloc = (destructor)method_dealloc,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_repr = (reprfunc)method_repr,
    .tp_call = PyVectorcall_Call,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Method(function, attr)\n--\n\nA method calling getattr(self, attr) (see _speedups.c).",
    .tp_traverse = (traverseproc)method_traverse,
    .tp_clear = (inquiry)method_clear,
    .tp_members = method_members,
    .tp_descr_get = method_descr_get,
    .tp_dictoffset = offsetof(Method, dict),
    .tp_new = method_new,
};

/* ---- the consumer's fetch path -------------------------------------------- */

/* time.monotonic(), in seconds: the clock the Python side computes deadlines
 * with (before 3.13 only through CPython's internal _PyTime API). */
static double
monotonic_s(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    if (PyTime_MonotonicRaw(&t) < 0)
        return -1.0;
    return PyTime_AsSecondsDouble(t);
#else
    return _PyTime_AsSecondsDouble(_PyTime_GetMonotonicClock());
#endif
}

/* Calm: whether a consumer may skip its gating core for a while (see
 * kafka_ordered._gating). quiet: nothing pending; until: the deadline
 * (monotonic seconds: the next auto-commit) before which a fetch may be
 * returned untouched; expected: {(topic, partition): next offset} of the
 * causal-token rule (shared with kafka_ordered._freshness); managed: the
 * topics with a layout, whose records are checked (see calm_admits); held:
 * {(topic, partition)} held by a pause at a gate, whose records never pass;
 * until_offsets: {(topic, partition): offset} whose reaching ends the calm;
 * limits: {(topic, partition): a closed gate's start}, whose records from
 * there on never pass. */
typedef struct {
    PyObject_HEAD
    char quiet;
    double until;
    PyObject *expected;
    PyObject *managed;
    PyObject *held;
    PyObject *stamp_prefix; /* b"<this consumer's layout-log id>:" (None: unknown) */
    long long view_next;    /* the view includes every layout-log offset below */
    PyObject *until_offsets;
    PyObject *limits;
} Calm;

static PyObject *
calm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Calm *self;
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Calm() takes no arguments");
        return NULL;
    }
    self = (Calm *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->quiet = 0;
    self->until = -Py_HUGE_VAL;
    self->expected = PyDict_New();
    self->managed = PyFrozenSet_New(NULL);
    self->held = PyFrozenSet_New(NULL);
    self->stamp_prefix = Py_NewRef(Py_None);
    self->view_next = 0;
    self->until_offsets = PyDict_New();
    self->limits = PyDict_New();
    if (self->expected == NULL || self->managed == NULL || self->held == NULL || self->until_offsets == NULL
        || self->limits == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
calm_traverse(Calm *self, visitproc visit, void *arg)
{
    Py_VISIT(self->expected);
    Py_VISIT(self->managed);
    Py_VISIT(self->held);
    Py_VISIT(self->stamp_prefix);
    Py_VISIT(self->until_offsets);
    Py_VISIT(self->limits);
    return 0;
}

static int
calm_clear(Calm *self)
{
    Py_CLEAR(self->expected);
    Py_CLEAR(self->managed);
    Py_CLEAR(self->held);
    Py_CLEAR(self->stamp_prefix);
    Py_CLEAR(self->until_offsets);
    Py_CLEAR(self->limits);
    return 0;
}

static void
calm_dealloc(Calm *self)
{
    PyObject_GC_UnTrack(self);
    calm_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
calm_get_quiet(Calm *self, void *closure)
{
    return PyBool_FromLong(self->quiet);
}

static int
calm_set_quiet(Calm *self, PyObject *value, void *closure)
{
    int v;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete quiet");
        return -1;
    }
    v = PyObject_IsTrue(value);
    if (v < 0)
        return -1;
    self->quiet = (char)v;
    return 0;
}

/* The dict-valued fields (expected, until_offsets): closure is the field's offset. */
static PyObject *
calm_get_dict(Calm *self, void *closure)
{
    return Py_NewRef(*(PyObject **)((char *)self + (Py_ssize_t)closure));
}

static int
calm_set_dict(Calm *self, PyObject *value, void *closure)
{
    if (value == NULL || !PyDict_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "expected, until_offsets and limits must be dicts");
        return -1;
    }
    Py_SETREF(*(PyObject **)((char *)self + (Py_ssize_t)closure), Py_NewRef(value));
    return 0;
}

/* The set-valued fields (managed, held): closure is the field's offset. */
static PyObject *
calm_get_set(Calm *self, void *closure)
{
    return Py_NewRef(*(PyObject **)((char *)self + (Py_ssize_t)closure));
}

static int
calm_set_set(Calm *self, PyObject *value, void *closure)
{
    if (value == NULL || !PyAnySet_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "managed and held must be sets or frozensets");
        return -1;
    }
    Py_SETREF(*(PyObject **)((char *)self + (Py_ssize_t)closure), Py_NewRef(value));
    return 0;
}

static PyMemberDef calm_members[] = {
    {"until", T_DOUBLE, offsetof(Calm, until), 0, "monotonic deadline for returning fetches untouched"},
    {"stamp_prefix", T_OBJECT, offsetof(Calm, stamp_prefix), 0, "b'<layout-log id>:' of this consumer's stamps"},
    {"view_next", T_LONGLONG, offsetof(Calm, view_next), 0, "the view includes every layout-log offset below"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef calm_getset[] = {
    {"quiet", (getter)calm_get_quiet, (setter)calm_set_quiet, "no gating work pending", NULL},
    {"expected", (getter)calm_get_dict, (setter)calm_set_dict,
     "{(topic, partition): next offset expected} (a dict)", (void *)offsetof(Calm, expected)},
    {"until_offsets", (getter)calm_get_dict, (setter)calm_set_dict,
     "{(topic, partition): offset}: a fetch that moves a partition's next offset there or past ends the calm (a dict)",
     (void *)offsetof(Calm, until_offsets)},
    {"limits", (getter)calm_get_dict, (setter)calm_set_dict,
     "{(topic, partition): a closed gate's start}: records from there on take the full path (a dict)",
     (void *)offsetof(Calm, limits)},
    {"managed", (getter)calm_get_set, (setter)calm_set_set, "topics whose records are checked (a set)",
     (void *)offsetof(Calm, managed)},
    {"held", (getter)calm_get_set, (setter)calm_set_set,
     "(topic, partition) held by a pause at a gate: their records take the full path (a set)",
     (void *)offsetof(Calm, held)},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CalmType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_ordered._speedups.Calm",
    .tp_basicsize = sizeof(Calm),
    .tp_dealloc = (destructor)calm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)calm_traverse,
    .tp_clear = (inquiry)calm_clear,
    .tp_doc = "Calm()\n--\n\nquiet, until, expected, managed, held, until_offsets, limits (see kafka_ordered._fastpath).",
    .tp_members = calm_members,
    .tp_getset = calm_getset,
    .tp_new = calm_new,
};


static PyObject *S_ERROR, *S_HEADERS, *S_TOPIC, *S_PARTITION, *S_OFFSET, *S_STAMP_HEADER, *S_SET_HEADERS, *S_VALUE, *S_KEY;

/* Whether stamp value v (vlen bytes) is "<prefix><digits>" (at most 18
 * digits); *off: the digits' number. */
static int
stamp_offset(const char *v, Py_ssize_t vlen, const char *prefix, Py_ssize_t plen, long long *off)
{
    Py_ssize_t j;
    if (vlen <= plen || vlen - plen > 18 || memcmp(v, prefix, (size_t)plen) != 0)
        return 0;
    *off = 0;
    for (j = plen; j < vlen; j++) {
        if (v[j] < '0' || v[j] > '9')
            return 0;
        *off = *off * 10 + (v[j] - '0');
    }
    return 1;
}

/* The kafka-ordered.reg headers of header list (or tuple) h (for the calm check and the full path): 0 none;
 * 1 only stamps "<prefix><digits>" of this consumer's log (*best: the
 * newest); 2 anything else the Python path decides (another log's stamp, an
 * encoded token, a move tombstone's header, an unknown shape). */
static int
own_stamps(PyObject *h, const char *prefix, Py_ssize_t plen, long long *best)
{
    Py_ssize_t i, n;
    PyObject **items;
    int found = 0;
    if (!PyList_Check(h) && !PyTuple_Check(h))
        return 2;
    n = PySequence_Fast_GET_SIZE(h);
    items = PySequence_Fast_ITEMS(h);
    for (i = 0; i < n; i++) {
        PyObject *t = items[i], *name, *value;
        long long off = 0;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2)
            return 2;
        name = PyTuple_GET_ITEM(t, 0);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, "kafka-ordered.moved") == 0)
            return 2;
        if (PyUnicode_Compare(name, S_STAMP_HEADER) != 0)
            continue;
        value = PyTuple_GET_ITEM(t, 1);
        if (plen == 0 || !PyBytes_Check(value)
                || !stamp_offset(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), prefix, plen, &off))
            return 2;
        if (!found || off > *best)
            *best = off;
        found = 1;
    }
    return found;
}

/* *pre, *plen: the stamp prefix prefix when it is bytes (returns whether it is), else
 * "" and 0 (no stamp then counts as this log's). */
static int
prefix_of(PyObject *prefix, const char **pre, Py_ssize_t *plen)
{
    if (PyBytes_Check(prefix)) {
        *pre = PyBytes_AS_STRING(prefix);
        *plen = PyBytes_GET_SIZE(prefix);
        return 1;
    }
    *pre = "";
    *plen = 0;
    return 0;
}

/* The calm check's verdict on what own_stamps (or c_own_stamps) found, c
 * with newest stamp best: a stamp the view does not include yet (at or past
 * calm->view_next) leaves the record to the full path (2). */
static int
view_includes(Calm *calm, int c, long long best)
{
    return c == 1 && best >= calm->view_next ? 2 : c;
}

/* The kafka-ordered.reg headers of a header list: 0 none; 1 every one is a
 * stamp of this consumer's log at an offset its view includes (the record
 * costs nothing more: the header is only removed); 2 another stamp, or a
 * shape we do not know (the caller's slow path decides). */
static int
included_stamps(Calm *calm, PyObject *h)
{
    const char *pre;
    Py_ssize_t plen;
    long long best = -1;
    int c;
    prefix_of(calm->stamp_prefix, &pre, &plen);
    c = own_stamps(h, pre, plen, &best);
    return view_includes(calm, c, best);
}

/* Header list (or tuple) h, whose shape own_stamps checked, as a new list
 * without its kafka-ordered.reg headers. */
static PyObject *
without_stamps(PyObject *h)
{
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(h);
    PyObject **items = PySequence_Fast_ITEMS(h);
    PyObject *left = PyList_New(0);
    if (left == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *t = items[i];
        if (PyUnicode_Compare(PyTuple_GET_ITEM(t, 0), S_STAMP_HEADER) != 0 && PyList_Append(left, t) < 0) {
            Py_DECREF(left);
            return NULL;
        }
    }
    return left;
}

/* Remove the kafka-ordered.reg headers of message m (header list h). */
static int
strip_stamps(PyObject *m, PyObject *h)
{
    PyObject *left = without_stamps(h), *r;
    if (left == NULL)
        return -1;
    r = PyObject_CallMethodOneArg(m, S_SET_HEADERS, PyList_GET_SIZE(left) ? left : Py_None);
    Py_DECREF(left);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *
call0(PyObject *m, PyObject *name)
{
    return PyObject_VectorcallMethod(name, &m, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* The leading fields of confluent_kafka.Message as confluent-kafka 2.x lays
 * them out (src/confluent_kafka/src/confluent_kafka.h). Read only for
 * instances of message_type, which is set by use_message_layout() once
 * kafka_ordered._fastpath checked message_fields() against the methods on
 * real instances at import; otherwise the methods are called. */
typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *value;
    PyObject *key;
    PyObject *headers;   /* the Python list, once made */
    void *c_headers;     /* librdkafka's headers, until converted */
    PyObject *error;
    int32_t partition;
    int64_t offset;
} CflMessage;

static PyTypeObject *message_type = NULL;

/* librdkafka's header functions, from the library the client's extension
 * links (see use_message_layout): with them the calm check and take_stamps
 * read a message's headers where librdkafka keeps them (c_headers, until
 * headers() converts them) and remove this log's stamps there, making no
 * Python object. All NULL: headers() is called. */
typedef int (*rdk_header_get_all_t)(const void *hdrs, size_t idx, const char **name, const void **value,
                                    size_t *size);
typedef int (*rdk_header_remove_t)(void *hdrs, const char *name);
typedef size_t (*rdk_header_cnt_t)(const void *hdrs);
typedef void (*rdk_headers_destroy_t)(void *hdrs);
static struct {
    rdk_header_get_all_t get_all;
    rdk_header_remove_t remove;
    rdk_header_cnt_t cnt;
    rdk_headers_destroy_t destroy;
} rdk = {NULL, NULL, NULL, NULL};

/* Find rdk's functions through the shared object at path (already loaded:
 * never loads one); 1 when all are found, else 0 and none is used. */
static int
rdk_find(const char *path)
{
    void *lib = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (lib != NULL) {
        rdk.get_all = (rdk_header_get_all_t)dlsym(lib, "rd_kafka_header_get_all");
        rdk.remove = (rdk_header_remove_t)dlsym(lib, "rd_kafka_header_remove");
        rdk.cnt = (rdk_header_cnt_t)dlsym(lib, "rd_kafka_header_cnt");
        rdk.destroy = (rdk_headers_destroy_t)dlsym(lib, "rd_kafka_headers_destroy");
    }
    if (lib == NULL || !rdk.get_all || !rdk.remove || !rdk.cnt || !rdk.destroy) {
        memset(&rdk, 0, sizeof(rdk));
        return 0;
    }
    return 1;
}

/* own_stamps for a message whose headers librdkafka still holds
 * (cm->c_headers; cm->headers NULL). Needs rdk. */
static int
c_own_stamps(CflMessage *cm, const char *prefix, Py_ssize_t plen, long long *best)
{
    const char *name;
    const void *value;
    size_t size, i;
    long long off;
    int found = 0;
    for (i = 0; rdk.get_all(cm->c_headers, i, &name, &value, &size) == 0; i++) {
        if (strcmp(name, "kafka-ordered.moved") == 0)
            return 2;
        if (strcmp(name, "kafka-ordered.reg") != 0)
            continue;
        if (plen == 0 || value == NULL || size > PY_SSIZE_T_MAX
                || !stamp_offset((const char *)value, (Py_ssize_t)size, prefix, plen, &off))
            return 2;
        if (!found || off > *best)
            *best = off;
        found = 1;
    }
    return found;
}

/* Remove the kafka-ordered.reg headers librdkafka holds for cm; drop its
 * headers once none is left (headers() then returns None, as after
 * set_headers(None)). Needs rdk. */
static void
c_strip_stamps(CflMessage *cm)
{
    rdk.remove(cm->c_headers, "kafka-ordered.reg");
    if (rdk.cnt(cm->c_headers) == 0) {
        rdk.destroy(cm->c_headers);
        cm->c_headers = NULL;
    }
}

/* message_fields(m): (topic, value, key, headers, has c_headers, error,
 * partition, offset) read from m's memory as CflMessage (None for NULL):
 * what _fastpath compares with m's methods before use_message_layout(). */
static PyObject *
py_message_fields(PyObject *module, PyObject *m)
{
    CflMessage *c = (CflMessage *)m;
    if (Py_TYPE(m)->tp_basicsize < (Py_ssize_t)sizeof(CflMessage)) {
        PyErr_SetString(PyExc_TypeError, "object too small to be a confluent_kafka.Message");
        return NULL;
    }
#define OR_NONE(o) ((o) ? (o) : Py_None)
    return Py_BuildValue("(OOOOOOiL)", OR_NONE(c->topic), OR_NONE(c->value), OR_NONE(c->key), OR_NONE(c->headers),
                         c->c_headers ? Py_True : Py_False, OR_NONE(c->error), (int)c->partition,
                         (long long)c->offset);
#undef OR_NONE
}

/* use_message_layout(type or None, library=None): read instances of type
 * as CflMessage; their librdkafka headers too when library (the path of the
 * loaded extension that links librdkafka) gives its header functions.
 * Returns whether it does. */
static PyObject *
py_use_message_layout(PyObject *module, PyObject *args)
{
    PyObject *t, *library = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:use_message_layout", &t, &library))
        return NULL;
    memset(&rdk, 0, sizeof(rdk));
    if (t == Py_None) {
        Py_CLEAR(message_type);
        Py_RETURN_FALSE;
    }
    if (!PyType_Check(t) || ((PyTypeObject *)t)->tp_basicsize < (Py_ssize_t)sizeof(CflMessage)
            || (library != Py_None && !PyUnicode_Check(library))) {
        PyErr_SetString(PyExc_TypeError, "use_message_layout: a type laid out as confluent_kafka.Message, or None; "
                        "library: a path, or None");
        return NULL;
    }
    Py_INCREF(t);
    Py_XSETREF(message_type, (PyTypeObject *)t);
    if (library != Py_None) {
        const char *path = PyUnicode_AsUTF8(library);
        if (path == NULL)
            return NULL;
        if (rdk_find(path))
            Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

/* The causal-token check of a calm fetch (confluent-kafka Messages): 1 when
 * every record may be returned untouched (no error, no kafka-ordered.reg
 * header; every record of a managed topic at the next offset expected for
 * its partition), after which the expected offsets are moved past the fetch
 * (a partition reaching its offset in until_offsets ends the calm);
 * 0 (nothing changed) when the caller must take the full path; -1 on error. */
static int
calm_moved(Calm *calm, PyObject *key, PyObject *nxt)
{
    PyObject *at;
    int r;
    if (PyDict_SetItem(calm->expected, key, nxt) < 0)
        return -1;
    if (!PyDict_GET_SIZE(calm->until_offsets))
        return 0;
    at = PyDict_GetItemWithError(calm->until_offsets, key); /* borrowed */
    if (at == NULL)
        return PyErr_Occurred() ? -1 : 0;
    r = PyObject_RichCompareBool(nxt, at, Py_GE);
    if (r > 0)
        calm->quiet = 0;
    return r < 0 ? -1 : 0;
}

/* Whether a run of partition key may pass the calm check: -1 on error; 0
 * when the partition is held (or its limit is not an int); 1 with *limit
 * set to its closed gate's start (LLONG_MAX: none), from which no record
 * passes. */
static int
calm_run_allowed(Calm *calm, PyObject *key, long long *limit)
{
    PyObject *v;
    int c;
    *limit = LLONG_MAX;
    if (PySet_GET_SIZE(calm->held)) {
        c = PySet_Contains(calm->held, key);
        if (c != 0)
            return c < 0 ? -1 : 0;
    }
    if (PyDict_GET_SIZE(calm->limits)) {
        v = PyDict_GetItemWithError(calm->limits, key); /* borrowed */
        if (v == NULL)
            return PyErr_Occurred() ? -1 : 1;
        if (!PyLong_Check(v))
            return 0;
        *limit = PyLong_AsLongLong(v);
        if (*limit == -1 && PyErr_Occurred())
            return -1;
    }
    return 1;
}

/* The kafka-ordered.reg headers of message m: 0 none, or only stamps the
 * view includes (removed now); 1 the full path decides (see
 * included_stamps); -1 on error. */
static int
message_stamps(Calm *calm, PyObject *m)
{
    CflMessage *cm = Py_TYPE(m) == message_type ? (CflMessage *)m : NULL;
    PyObject *h;
    int c;
    if (cm != NULL && cm->headers == NULL && rdk.get_all != NULL) {
        const char *pre;
        Py_ssize_t plen;
        long long best = -1;
        if (cm->c_headers == NULL)
            return 0;
        prefix_of(calm->stamp_prefix, &pre, &plen);
        c = c_own_stamps(cm, pre, plen, &best);
        c = view_includes(calm, c, best);
        if (c == 1)
            c_strip_stamps(cm);
        return c == 2;
    }
    h = call0(m, S_HEADERS);
    if (h == NULL)
        return -1;
    c = h == Py_None ? 0 : included_stamps(calm, h);
    if (c == 1 && strip_stamps(m, h) < 0)
        c = -1;
    Py_DECREF(h);
    return c == 2 ? 1 : c == 1 ? 0 : c;
}

/* Whether str a equals str b (b the topic of the run so far): every
 * Message holds a topic string of its own, so this runs once per record.
 * Inline for exact strings (length, kind, then the bytes), which is most of
 * the calm check's cost through PyUnicode_Compare; else PyUnicode_Compare. */
static inline int
same_topic(PyObject *a, PyObject *b)
{
    Py_ssize_t n;
    int kind;
    if (a == b)
        return 1;
    if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b))
        return PyUnicode_Compare(a, b) == 0;
#if PY_VERSION_HEX < 0x030C0000
    if (!PyUnicode_IS_READY(a) || !PyUnicode_IS_READY(b))
        return PyUnicode_Compare(a, b) == 0;
#endif
    n = PyUnicode_GET_LENGTH(a);
    kind = PyUnicode_KIND(a);
    return n == PyUnicode_GET_LENGTH(b) && kind == PyUnicode_KIND(b)
           && memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * (size_t)kind) == 0;
}

static int
calm_admits(Calm *calm, PyObject *res)
{
    PyObject *one[1], **items, *ends = NULL, *key = NULL, *prev_topic = NULL;
    Py_ssize_t n, i;
    long long prev_part = -1, prev_off = -1, limit = LLONG_MAX;
    int ok = 1;
    if (PyList_CheckExact(res)) {
        items = PySequence_Fast_ITEMS(res);
        n = PyList_GET_SIZE(res);
    } else {
        one[0] = res;
        items = one;
        n = 1;
    }
    Py_INCREF(res);
    for (i = 0; i < n && ok == 1; i++) {
        PyObject *m = items[i], *v, *topic = NULL, *part = NULL, *off = NULL;
        long long p, o;
        int c;
        CflMessage *cm = Py_TYPE(m) == message_type ? (CflMessage *)m : NULL;
        if (cm != NULL && (cm->error == NULL || cm->error == Py_None) && cm->topic != NULL) {
            /* A record without error: its fields read in place (its headers,
             * if any, by message_stamps). A run goes on without hashing the
             * topic, a new string in every record. */
            if (cm->headers != NULL || cm->c_headers != NULL) {
                c = message_stamps(calm, m);
                if (c != 0) { ok = c < 0 ? -1 : 0; break; }
            }
            topic = cm->topic;
            p = cm->partition;
            o = cm->offset;
            if (prev_topic != NULL && p == prev_part && same_topic(topic, prev_topic)) {
                if (o != prev_off + 1 || o >= limit) { ok = 0; break; }
                prev_off = o;
                continue;
            }
            Py_INCREF(topic);
            c = PySet_Contains(calm->managed, topic);
            if (c <= 0) {
                Py_DECREF(topic);
                if (c < 0) { ok = -1; break; }
                continue;
            }
            part = PyLong_FromLongLong(p);
            if (part == NULL) {
                Py_DECREF(topic);
                ok = -1;
                break;
            }
        } else {
        v = call0(m, S_ERROR);
        if (v == NULL) { ok = -1; break; }
        c = v != Py_None;
        Py_DECREF(v);
        if (c) { ok = 0; break; }
        c = message_stamps(calm, m);
        if (c != 0) { ok = c < 0 ? -1 : 0; break; }
        topic = call0(m, S_TOPIC);
        if (topic == NULL) { ok = -1; break; }
        c = PySet_Contains(calm->managed, topic);
        if (c <= 0) {
            Py_DECREF(topic);
            if (c < 0) { ok = -1; break; }
            continue;
        }
        part = call0(m, S_PARTITION);
        off = part ? call0(m, S_OFFSET) : NULL;
        if (off == NULL || !PyLong_Check(part) || !PyLong_Check(off)) {
            ok = off == NULL ? -1 : 0;
            Py_DECREF(topic);
            Py_XDECREF(part);
            Py_XDECREF(off);
            break;
        }
        p = PyLong_AsLongLong(part);
        o = PyLong_AsLongLong(off);
        Py_DECREF(off);
        }
        if (prev_topic != NULL && p == prev_part && same_topic(topic, prev_topic)) {
            Py_DECREF(part);
            Py_DECREF(topic);
            if (o != prev_off + 1 || o >= limit) { ok = 0; break; }
            prev_off = o;
            continue;
        }
        /* a new run: the previous one ends; this one must start where expected */
        if (key != NULL) {
            PyObject *nxt = PyLong_FromLongLong(prev_off + 1), *pair;
            if (ends == NULL)
                ends = PyList_New(0);
            pair = nxt && ends ? PyTuple_Pack(2, key, nxt) : NULL;
            Py_XDECREF(nxt);
            if (pair == NULL || PyList_Append(ends, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(part);
                Py_DECREF(topic);
                ok = -1;
                break;
            }
            Py_DECREF(pair);
            Py_CLEAR(key);
        }
        key = PyTuple_Pack(2, topic, part);
        Py_DECREF(part);
        Py_XSETREF(prev_topic, topic);
        if (key == NULL) { ok = -1; break; }
        c = calm_run_allowed(calm, key, &limit);
        if (c != 1) { ok = c; break; }
        if (o >= limit) { ok = 0; break; }
        v = PyDict_GetItemWithError(calm->expected, key); /* borrowed */
        if (v == NULL) {
            ok = PyErr_Occurred() ? -1 : 0;
            break;
        }
        if (!PyLong_Check(v) || PyLong_AsLongLong(v) != o) { ok = 0; break; }
        prev_part = p;
        prev_off = o;
    }
    if (ok == 1 && key != NULL) {
        Py_ssize_t j, m;
        PyObject *nxt = PyLong_FromLongLong(prev_off + 1);
        if (nxt == NULL || calm_moved(calm, key, nxt) < 0)
            ok = -1;
        Py_XDECREF(nxt);
        m = ends ? PyList_GET_SIZE(ends) : 0;
        for (j = 0; j < m && ok == 1; j++) {
            PyObject *pair = PyList_GET_ITEM(ends, j);
            if (calm_moved(calm, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0)
                ok = -1;
        }
    }
    Py_XDECREF(key);
    Py_XDECREF(prev_topic);
    Py_XDECREF(ends);
    Py_DECREF(res);
    return ok;
}

/* admits_runs(calm, fetched, replace): calm_admits for a fetch grouped by
 * partition (kafka-python's and aiokafka's {TopicPartition: [record, ...]},
 * each list in offset order; records read through their attributes): per
 * partition, included stamps removed (the record is replaced in its list by
 * replace(record, headers left)), then on a managed topic the run checked
 * (first offset as expected, no gap, not held, below its gate's limit); on
 * success the expected offsets move past every run. The twin of
 * kafka_ordered._fastpath.admits_runs_py. */
static PyObject *
py_admits_runs(PyObject *module, PyObject *args)
{
    Calm *calm;
    PyObject *fetched, *replace, *tp, *recs, *ends;
    Py_ssize_t pos = 0;
    int ok = 1;
    if (!PyArg_ParseTuple(args, "O!OO:admits_runs", &CalmType, &calm, &fetched, &replace))
        return NULL;
    if (!PyDict_Check(fetched))
        Py_RETURN_FALSE;
    ends = PyList_New(0);
    if (ends == NULL)
        return NULL;
    Py_INCREF(fetched);
    while (ok == 1 && PyDict_Next(fetched, &pos, &tp, &recs)) {
        PyObject *topic, *part, *key, *v, *first, *last, *nxt, *pair;
        Py_ssize_t i, n;
        long long f, l, limit;
        int c;
        if (!PyList_Check(recs)) { ok = 0; break; }
        n = PyList_GET_SIZE(recs);
        if (n == 0)
            continue;
        for (i = 0; i < n && ok == 1; i++) {
            PyObject *r = PyList_GET_ITEM(recs, i), *h, *left, *nr;
            h = PyObject_GetAttr(r, S_HEADERS);
            if (h == NULL) { ok = -1; break; }
            c = PyObject_IsTrue(h);
            if (c > 0)
                c = included_stamps(calm, h);
            if (c == 1) {
                left = without_stamps(h);
                nr = left ? PyObject_CallFunctionObjArgs(replace, r, left, NULL) : NULL;
                Py_XDECREF(left);
                if (nr == NULL)
                    ok = -1;
                else
                    PyList_SetItem(recs, i, nr); /* steals nr; r goes */
            } else if (c == 2) {
                ok = 0;
            } else if (c < 0) {
                ok = -1;
            }
            Py_DECREF(h);
        }
        if (ok != 1)
            break;
        topic = PyObject_GetAttr(tp, S_TOPIC);
        if (topic == NULL) { ok = -1; break; }
        c = PySet_Contains(calm->managed, topic);
        if (c <= 0) {
            Py_DECREF(topic);
            if (c < 0) { ok = -1; break; }
            continue;
        }
        part = PyObject_GetAttr(tp, S_PARTITION);
        key = part ? PyTuple_Pack(2, topic, part) : NULL;
        Py_DECREF(topic);
        Py_XDECREF(part);
        if (key == NULL) { ok = -1; break; }
        first = PyObject_GetAttr(PyList_GET_ITEM(recs, 0), S_OFFSET);
        last = first ? PyObject_GetAttr(PyList_GET_ITEM(recs, n - 1), S_OFFSET) : NULL;
        if (last == NULL || !PyLong_Check(first) || !PyLong_Check(last)) {
            ok = last == NULL ? -1 : 0;
            Py_XDECREF(first);
            Py_XDECREF(last);
            Py_DECREF(key);
            break;
        }
        f = PyLong_AsLongLong(first);
        l = PyLong_AsLongLong(last);
        Py_DECREF(first);
        Py_DECREF(last);
        if ((f == -1 || l == -1) && PyErr_Occurred()) { Py_DECREF(key); ok = -1; break; }
        v = PyDict_GetItemWithError(calm->expected, key); /* borrowed */
        if (v == NULL && PyErr_Occurred()) { Py_DECREF(key); ok = -1; break; }
        if (v == NULL || !PyLong_Check(v) || PyLong_AsLongLong(v) != f || l - f + 1 != n) {
            Py_DECREF(key);
            ok = 0;
            break;
        }
        c = calm_run_allowed(calm, key, &limit);
        if (c != 1 || l >= limit) { Py_DECREF(key); ok = c == 1 ? 0 : c; break; }
        nxt = PyLong_FromLongLong(l + 1);
        pair = nxt ? PyTuple_Pack(2, key, nxt) : NULL;
        Py_XDECREF(nxt);
        Py_DECREF(key);
        if (pair == NULL || PyList_Append(ends, pair) < 0) {
            Py_XDECREF(pair);
            ok = -1;
            break;
        }
        Py_DECREF(pair);
    }
    if (ok == 1) {
        Py_ssize_t j, m = PyList_GET_SIZE(ends);
        for (j = 0; j < m && ok == 1; j++) {
            PyObject *pair = PyList_GET_ITEM(ends, j);
            if (calm_moved(calm, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0)
                ok = -1;
        }
    }
    Py_DECREF(ends);
    Py_DECREF(fetched);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok);
}

/* FastFetch(fetch, slow, after, idle, calm, timeout_at): a consumer's
 * poll/consume. Unless calm.quiet: slow(...) with the arguments unchanged.
 * Else fetch(...) with them, then, reading the clock once: before calm.until
 * (and still quiet) the result is returned untouched when empty or when
 * calm_admits it, else through after(result); past it an empty result (None,
 * [] or {}) is returned after idle() (the per-poll work, nothing being in
 * hand), any other goes through after(result).
 *
 * While calm.held is not empty (partitions wait at gates that other members
 * open) the fetch may not wait past calm.until, when those gates are looked
 * at again: its timeout (positional argument timeout_at, or the keyword
 * "timeout") is cut to what is left of the calm, and when that fetch comes
 * back empty the rest of the call's wait goes to slow(...). A call past the
 * calm's end, or without a timeout it can read, goes to slow(...). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fetch;
    PyObject *slow;
    PyObject *after;
    PyObject *idle;
    Calm *calm;
    Py_ssize_t timeout_at;
    PyObject *weakrefs;
} FastFetch;

static int
empty_result(PyObject *r)
{
    return r == Py_None || (PyList_CheckExact(r) && PyList_GET_SIZE(r) == 0) ||
           (PyDict_CheckExact(r) && PyDict_GET_SIZE(r) == 0);
}

/* Call fn with the vectorcall arguments, the one at index `where` replaced by `value`. */
static PyObject *
call_replaced(PyObject *fn, PyObject *const *args, size_t nargsf, PyObject *kwnames, Py_ssize_t where,
              PyObject *value)
{
    PyObject *copy[16];
    Py_ssize_t n = PyVectorcall_NARGS(nargsf) + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0), i;
    if (n > 16) {
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    for (i = 0; i < n; i++)
        copy[i] = i == where ? value : args[i];
    return PyObject_Vectorcall(fn, copy, PyVectorcall_NARGS(nargsf), kwnames);
}

/* Where the call's timeout is (index into args; -1: not given) and its value
 * (seconds; negative: wait forever). 0 when found and read; -1 otherwise. */
static int
ff_timeout(FastFetch *self, PyObject *const *args, size_t nargsf, PyObject *kwnames, Py_ssize_t *where,
           double *t)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    *where = -1;
    if (self->timeout_at < nargs)
        *where = self->timeout_at;
    for (i = 0; i < nkw && *where < 0; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "timeout") == 0)
            *where = nargs + i;
    if (*where < 0 || !(PyFloat_Check(args[*where]) || PyLong_Check(args[*where])))
        return -1;
    *t = PyFloat_AsDouble(args[*where]);
    if (*t == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* res (an empty fetch) once idle() ran (the per-poll work); NULL if it raised. */
static PyObject *
idle_then(FastFetch *self, PyObject *res)
{
    PyObject *out = PyObject_CallNoArgs(self->idle);
    if (out == NULL) {
        Py_DECREF(res);
        return NULL;
    }
    Py_DECREF(out);
    return res;
}

/* The fetch of a calm beside held partitions (see FastFetch): NULL with
 * *done = 0 when the call must go to slow(...) instead; else what it returns
 * (*done = 1: already the call's result). */
static PyObject *
ff_held_fetch(FastFetch *self, PyObject *const *args, size_t nargsf, PyObject *kwnames, int *done)
{
    Calm *calm = self->calm;
    Py_ssize_t where;
    double t, began = monotonic_s(), left = calm->until - began;
    PyObject *cut, *res, *rest, *out;
    *done = 0;
    if (left <= 0 || ff_timeout(self, args, nargsf, kwnames, &where, &t) < 0)
        return NULL;
    if (t >= 0 && t <= left)
        return PyObject_Vectorcall(self->fetch, args, nargsf, kwnames);
    cut = PyFloat_FromDouble(left);
    if (cut == NULL) {
        *done = 1;
        return NULL;
    }
    res = call_replaced(self->fetch, args, nargsf, kwnames, where, cut);
    Py_DECREF(cut);
    if (res == NULL || !empty_result(res))
        return res;
    /* Nothing came before the calm's end: the rest of the wait goes through the full path. */
    *done = 1;
    if (t < 0) {
        Py_DECREF(res);
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    t -= monotonic_s() - began;
    if (t <= 0) {
        return idle_then(self, res);
    }
    Py_DECREF(res);
    rest = PyFloat_FromDouble(t);
    if (rest == NULL)
        return NULL;
    out = call_replaced(self->slow, args, nargsf, kwnames, where, rest);
    Py_DECREF(rest);
    return out;
}

static PyObject *
ff_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastFetch *self = (FastFetch *)op;
    Calm *calm = self->calm;
    PyObject *res, *out;
    if (!calm->quiet)
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    if (PySet_GET_SIZE(calm->held)) {
        int done;
        res = ff_held_fetch(self, args, nargsf, kwnames, &done);
        if (done)
            return res;
        if (res == NULL) {
            if (PyErr_Occurred())
                return NULL;
            return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
    } else {
        res = PyObject_Vectorcall(self->fetch, args, nargsf, kwnames);
    }
    if (res == NULL)
        return NULL;
    if (calm->quiet && monotonic_s() < calm->until) {
        int ok;
        if (empty_result(res))
            return res;
        ok = calm_admits(calm, res);
        if (ok < 0) {
            Py_DECREF(res);
            return NULL;
        }
        if (ok)
            return res;
        out = PyObject_CallOneArg(self->after, res);
        Py_DECREF(res);
        return out;
    }
    if (empty_result(res)) {
        return idle_then(self, res);
    }
    out = PyObject_CallOneArg(self->after, res);
    Py_DECREF(res);
    return out;
}

static PyObject *
ff_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fetch", "slow", "after", "idle", "calm", "timeout_at", NULL};
    PyObject *fetch, *slow, *after, *idle, *calm;
    Py_ssize_t timeout_at = 0;
    FastFetch *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO!|n:FastFetch", kwlist, &fetch, &slow, &after, &idle,
                                     &CalmType, &calm, &timeout_at))
        return NULL;
    if (!PyCallable_Check(fetch) || !PyCallable_Check(slow) || !PyCallable_Check(after) || !PyCallable_Check(idle)) {
        PyErr_SetString(PyExc_TypeError, "fetch, slow, after and idle must be callable");
        return NULL;
    }
    self = (FastFetch *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = ff_vectorcall;
    self->fetch = Py_NewRef(fetch);
    self->slow = Py_NewRef(slow);
    self->after = Py_NewRef(after);
    self->idle = Py_NewRef(idle);
    self->calm = (Calm *)Py_NewRef(calm);
    self->timeout_at = timeout_at;
    return (PyObject *)self;
}

static int
ff_traverse(FastFetch *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fetch);
    Py_VISIT(self->slow);
    Py_VISIT(self->after);
    Py_VISIT(self->idle);
    Py_VISIT(self->calm);
    return 0;
}

static int
ff_clear(FastFetch *self)
{
    Py_CLEAR(self->fetch);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->after);
    Py_CLEAR(self->idle);
    Py_CLEAR(self->calm);
    return 0;
}

static void
ff_dealloc(FastFetch *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    ff_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ff_get_doc(FastFetch *self, void *closure)
{
    return PyObject_GetAttrString(self->slow, "__doc__");
}

static PyMemberDef ff_members[] = {
    {"__wrapped__", T_OBJECT_EX, offsetof(FastFetch, slow), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastFetch, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef ff_getset[] = {
    {"__doc__", (getter)ff_get_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastFetchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_ordered._speedups.FastFetch",
    .tp_basicsize = sizeof(FastFetch),
    .tp_dealloc = (destructor)ff_dealloc,
    .tp_vectorcall_offset = offsetof(FastFetch, vectorcall),
    .tp_weaklistoffset = offsetof(FastFetch, weakrefs),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)ff_traverse,
    .tp_clear = (inquiry)ff_clear,
    .tp_members = ff_members,
    .tp_getset = ff_getset,
    .tp_new = ff_new,
};

/* run_stamps(records, prefix, replace): the full path's stamp pass over
 * one partition's records of a grouped fetch (kafka-python, aiokafka; read
 * through their headers attribute): (the newest stamp "<prefix><digits>" of
 * this consumer's log among the records that carry only such
 * kafka-ordered.reg headers, or None; the records, those replaced by
 * replace(record, headers left) unless replace is None (a new list when any
 * was); [indices of the records left to the Python path: see own_stamps]). */
static PyObject *
py_run_stamps(PyObject *module, PyObject *args)
{
    PyObject *recs, *prefix, *replace, *out, *slow, *newest_obj;
    const char *pre;
    Py_ssize_t plen, i, n;
    long long newest = -1;
    int any = 0;
    if (!PyArg_ParseTuple(args, "O!OO:run_stamps", &PyList_Type, &recs, &prefix, &replace))
        return NULL;
    if (!prefix_of(prefix, &pre, &plen) && prefix != Py_None) {
        PyErr_SetString(PyExc_TypeError, "run_stamps: prefix must be bytes or None");
        return NULL;
    }
    slow = PyList_New(0);
    if (slow == NULL)
        return NULL;
    out = Py_NewRef(recs);
    n = PyList_GET_SIZE(recs);
    for (i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(out, i), *h;
        long long best = -1;
        int c;
        h = PyObject_GetAttr(r, S_HEADERS);
        if (h == NULL)
            goto error;
        if (h == Py_None || ((PyList_Check(h) || PyTuple_Check(h)) && PySequence_Fast_GET_SIZE(h) == 0)) {
            Py_DECREF(h);
            continue;
        }
        c = own_stamps(h, pre, plen, &best);
        if (c == 2) {
            PyObject *idx = PyLong_FromSsize_t(i);
            int bad = idx == NULL || PyList_Append(slow, idx) < 0;
            Py_XDECREF(idx);
            Py_DECREF(h);
            if (bad)
                goto error;
            continue;
        }
        if (c == 1) {
            if (!any || best > newest)
                newest = best;
            any = 1;
            if (replace != Py_None) {
                PyObject *left = without_stamps(h), *copy;
                copy = left ? PyObject_CallFunctionObjArgs(replace, r, left, NULL) : NULL;
                Py_XDECREF(left);
                if (copy == NULL) {
                    Py_DECREF(h);
                    goto error;
                }
                if (out == recs) {
                    PyObject *mine = PyList_GetSlice(recs, 0, n);
                    if (mine == NULL) {
                        Py_DECREF(copy);
                        Py_DECREF(h);
                        goto error;
                    }
                    Py_SETREF(out, mine);
                }
                PyList_SetItem(out, i, copy); /* steals copy */
            }
        }
        Py_DECREF(h);
    }
    newest_obj = any ? PyLong_FromLongLong(newest) : Py_NewRef(Py_None);
    if (newest_obj == NULL)
        goto error;
    return Py_BuildValue("(NNN)", newest_obj, out, slow);
error:
    Py_DECREF(out);
    Py_DECREF(slow);
    return NULL;
}

/* take_stamps(messages, prefix): for confluent_kafka Messages without
 * errors (a list): remove the stamps "<prefix><digits>" of this consumer's
 * log from the records that carry only such kafka-ordered.reg headers, and
 * return ({partition: newest stamp}, [indices of the records left to the
 * Python path: see own_stamps]). */
static PyObject *
py_take_stamps(PyObject *module, PyObject *args)
{
    PyObject *msgs, *prefix, *stamps = NULL, *slow = NULL;
    const char *pre;
    Py_ssize_t plen, i, n;
    if (!PyArg_ParseTuple(args, "O!O:take_stamps", &PyList_Type, &msgs, &prefix))
        return NULL;
    if (!prefix_of(prefix, &pre, &plen) && prefix != Py_None) {
        PyErr_SetString(PyExc_TypeError, "take_stamps: prefix must be bytes or None");
        return NULL;
    }
    stamps = PyDict_New();
    slow = PyList_New(0);
    if (stamps == NULL || slow == NULL)
        goto error;
    n = PyList_GET_SIZE(msgs);
    for (i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i), *h, *part, *old;
        CflMessage *cm = Py_TYPE(m) == message_type ? (CflMessage *)m : NULL;
        long long best = -1;
        int c;
        if (cm != NULL && cm->headers == NULL && cm->c_headers == NULL)
            continue;
        if (cm != NULL && cm->headers == NULL && rdk.get_all != NULL) {
            c = c_own_stamps(cm, pre, plen, &best);
            if (c == 1)
                c_strip_stamps(cm);
        } else {
            h = call0(m, S_HEADERS);
            if (h == NULL)
                goto error;
            c = h == Py_None ? 0 : own_stamps(h, pre, plen, &best);
            if (c == 1 && strip_stamps(m, h) < 0) {
                Py_DECREF(h);
                goto error;
            }
            Py_DECREF(h);
        }
        if (c == 2) {
            PyObject *idx = PyLong_FromSsize_t(i);
            int bad = idx == NULL || PyList_Append(slow, idx) < 0;
            Py_XDECREF(idx);
            if (bad)
                goto error;
            continue;
        }
        if (c == 0)
            continue;
        part = cm != NULL ? PyLong_FromLong(cm->partition) : call0(m, S_PARTITION);
        if (part == NULL)
            goto error;
        old = PyDict_GetItemWithError(stamps, part); /* borrowed */
        if (old == NULL && PyErr_Occurred()) {
            Py_DECREF(part);
            goto error;
        }
        if (old == NULL || PyLong_AsLongLong(old) < best) {
            PyObject *b = PyLong_FromLongLong(best);
            int bad = b == NULL || PyDict_SetItem(stamps, part, b) < 0;
            Py_XDECREF(b);
            if (bad) {
                Py_DECREF(part);
                goto error;
            }
        }
        Py_DECREF(part);
    }
    return Py_BuildValue("(NN)", stamps, slow);
error:
    Py_XDECREF(stamps);
    Py_XDECREF(slow);
    return NULL;
}

/* truthy(o): 1 when o is set and true, 0 when unset or false, -1 on error. */
static int
truthy(PyObject *o)
{
    return o == NULL || o == Py_None ? 0 : PyObject_IsTrue(o);
}

/* fetch_shape(messages): (partitions, any error, any headers) of a list of
 * confluent_kafka.Messages, the partitions as Message.partition() gives
 * them, in one pass (fields read in place for message_type, else the
 * methods called). "any headers" is also true for a record whose
 * librdkafka headers are not converted yet, even if they turn out empty:
 * it only sends the caller to its per-record header pass. */
static PyObject *
py_fetch_shape(PyObject *module, PyObject *msgs)
{
    PyObject *parts;
    Py_ssize_t i, n;
    int any_error = 0, any_headers = 0;
    if (!PyList_CheckExact(msgs)) {
        PyErr_SetString(PyExc_TypeError, "fetch_shape: a list of confluent_kafka.Message");
        return NULL;
    }
    n = PyList_GET_SIZE(msgs);
    parts = PyList_New(n);
    if (parts == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i), *p, *o;
        CflMessage *cm = Py_TYPE(m) == message_type ? (CflMessage *)m : NULL;
        int t;
        if (cm != NULL) {
            if (cm->partition == -1) {
                Py_INCREF(Py_None);
                p = Py_None;
            } else {
                p = PyLong_FromLong((long)cm->partition);
            }
            if (p == NULL)
                goto error;
            PyList_SET_ITEM(parts, i, p);
            if (!any_error && cm->error != NULL && cm->error != Py_None)
                any_error = 1;
            if (!any_headers) {
                t = cm->c_headers != NULL ? 1 : truthy(cm->headers);
                if (t < 0)
                    goto error;
                any_headers = t;
            }
            continue;
        }
        p = call0(m, S_PARTITION);
        if (p == NULL)
            goto error;
        PyList_SET_ITEM(parts, i, p);
        if (!any_error) {
            o = call0(m, S_ERROR);
            if (o == NULL)
                goto error;
            any_error = o != Py_None;
            Py_DECREF(o);
        }
        if (!any_headers) {
            o = call0(m, S_HEADERS);
            if (o == NULL)
                goto error;
            t = truthy(o);
            Py_DECREF(o);
            if (t < 0)
                goto error;
            any_headers = t;
        }
    }
    return Py_BuildValue("(NOO)", parts, any_error ? Py_True : Py_False, any_headers ? Py_True : Py_False);
error:
    Py_DECREF(parts);
    return NULL;
}

/* size_of(o): len(o), 0 for NULL or None; -1 on error. */
static Py_ssize_t
size_of(PyObject *o)
{
    if (o == NULL || o == Py_None)
        return 0;
    if (PyBytes_CheckExact(o))
        return PyBytes_GET_SIZE(o);
    return PyObject_Size(o);
}

/* message_bytes(messages): the key and value bytes of a list of
 * confluent_kafka.Messages (what a partition keeps in hand). */
static PyObject *
py_message_bytes(PyObject *module, PyObject *msgs)
{
    Py_ssize_t i, n, total = 0;
    if (!PyList_CheckExact(msgs)) {
        PyErr_SetString(PyExc_TypeError, "message_bytes: a list of confluent_kafka.Message");
        return NULL;
    }
    n = PyList_GET_SIZE(msgs);
    for (i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        CflMessage *cm = Py_TYPE(m) == message_type ? (CflMessage *)m : NULL;
        Py_ssize_t k, v;
        if (cm != NULL) {
            v = size_of(cm->value);
            k = v < 0 ? -1 : size_of(cm->key);
        } else {
            PyObject *o = call0(m, S_VALUE);
            v = o == NULL ? -1 : size_of(o);
            Py_XDECREF(o);
            o = v < 0 ? NULL : call0(m, S_KEY);
            k = o == NULL ? -1 : size_of(o);
            Py_XDECREF(o);
        }
        if (v < 0 || k < 0)
            return NULL;
        total += k + v;
    }
    return PyLong_FromSsize_t(total);
}

/* ---- module ------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"murmur2", py_murmur2, METH_O,
     "murmur2($module, key, /)\n--\n\nKafka's Java murmur2 (seed 0x9747b28c) & 0x7fffffff."},
    {"murmur3", py_murmur3, METH_O,
     "murmur3($module, key, /)\n--\n\nMurmurHash3 x86_32, seed 0, & 0x7fffffff (mmh3.hash(key) & 0x7fffffff)."},
    {"crc32", py_crc32, METH_O, "crc32($module, key, /)\n--\n\nThe unsigned CRC-32 (zlib.crc32(key))."},
    {"message_fields", py_message_fields, METH_O,
     "message_fields($module, message, /)\n--\n\n(topic, value, key, headers, has librdkafka headers, error, "
     "partition, offset) read from a confluent_kafka.Message's memory (checked against its methods before use)."},
    {"take_stamps", py_take_stamps, METH_VARARGS,
     "take_stamps($module, messages, prefix, /)\n--\n\nRemove this log's stamps (prefix + digits) from confluent_kafka "
     "Messages that carry only such kafka-ordered.reg headers: ({partition: newest stamp}, [indices left to the "
     "Python path])."},
    {"run_stamps", py_run_stamps, METH_VARARGS,
     "run_stamps($module, records, prefix, replace, /)\n--\n\nThe full path's stamp pass over one partition's records "
     "of a grouped fetch: (newest stamp of this log among the records carrying only such kafka-ordered.reg headers, "
     "or None; the records, those replaced by replace(record, headers left) unless replace is None; [indices left to "
     "the Python path])."},
    {"admits_runs", py_admits_runs, METH_VARARGS,
     "admits_runs($module, calm, fetched, replace, /)\n--\n\nThe calm check of a fetch grouped by partition "
     "(kafka-python, aiokafka): see kafka_ordered._fastpath.admits_runs_py."},
    {"fetch_shape", py_fetch_shape, METH_O,
     "fetch_shape($module, messages, /)\n--\n\n(partitions, any error, any headers) of a list of confluent_kafka.Messages "
     "in one pass."},
    {"message_bytes", py_message_bytes, METH_O,
     "message_bytes($module, messages, /)\n--\n\nThe key and value bytes of a list of confluent_kafka.Messages."},
    {"use_message_layout", py_use_message_layout, METH_VARARGS,
     "use_message_layout($module, type, library=None, /)\n--\n\nRead instances of type (or none: None) in place in "
     "the calm check; their librdkafka headers too when library (the path of the loaded extension linking librdkafka) "
     "gives librdkafka's header functions. Returns whether it reads those."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafka_ordered._speedups",
    .m_doc = "C key hashes and the fixed-layout key -> partition function (optional; see kafka_ordered._hashing).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m;
    crc32_init();
    if (PyType_Ready(&LinearPartitionerType) < 0)
        return NULL;
    if (PyType_Ready(&ProducerRouteType) < 0 || PyType_Ready(&FastProduceType) < 0 || PyType_Ready(&MethodType) < 0 ||
        PyType_Ready(&CalmType) < 0 || PyType_Ready(&FastFetchType) < 0)
        return NULL;
    KW_TOPIC = PyUnicode_InternFromString("topic");
    KW_VALUE = PyUnicode_InternFromString("value");
    KW_KEY = PyUnicode_InternFromString("key");
    KW_ON_DELIVERY = PyUnicode_InternFromString("on_delivery");
    KW_CALLBACK = PyUnicode_InternFromString("callback");
    KW_PARTITION = PyUnicode_InternFromString("partition");
    KW_TIMESTAMP = PyUnicode_InternFromString("timestamp");
    KW_HEADERS = PyUnicode_InternFromString("headers");
    if (!KW_TOPIC || !KW_VALUE || !KW_KEY || !KW_ON_DELIVERY || !KW_CALLBACK || !KW_PARTITION || !KW_TIMESTAMP || !KW_HEADERS)
        return NULL;
    S_ERROR = PyUnicode_InternFromString("error");
    S_HEADERS = PyUnicode_InternFromString("headers");
    S_TOPIC = PyUnicode_InternFromString("topic");
    S_PARTITION = PyUnicode_InternFromString("partition");
    S_OFFSET = PyUnicode_InternFromString("offset");
    S_STAMP_HEADER = PyUnicode_InternFromString("kafka-ordered.reg");
    S_SET_HEADERS = PyUnicode_InternFromString("set_headers");
    S_VALUE = PyUnicode_InternFromString("value");
    S_KEY = PyUnicode_InternFromString("key");
    if (!S_ERROR || !S_HEADERS || !S_TOPIC || !S_PARTITION || !S_OFFSET || !S_STAMP_HEADER || !S_SET_HEADERS ||
        !S_VALUE || !S_KEY)
        return NULL;
    KWN_TIMESTAMP = PyTuple_Pack(1, KW_TIMESTAMP);
    KWN_HEADERS = PyTuple_Pack(1, KW_HEADERS);
    KWN_BOTH = PyTuple_Pack(2, KW_TIMESTAMP, KW_HEADERS);
    if (!KWN_TIMESTAMP || !KWN_HEADERS || !KWN_BOTH)
        return NULL;
    m = PyModule_Create(&speedups_module);
    if (m == NULL)
        return NULL;
    /* Bumped whenever kafka_ordered needs something this module did not
     * have: a stale build is then refused (kafka_ordered._hashing). */
    if (PyModule_AddIntConstant(m, "API", SPEEDUPS_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "LinearPartitioner", (PyObject *)&LinearPartitionerType) < 0 ||
        PyModule_AddObjectRef(m, "ProducerRoute", (PyObject *)&ProducerRouteType) < 0 ||
        PyModule_AddObjectRef(m, "FastProduce", (PyObject *)&FastProduceType) < 0 ||
        PyModule_AddObjectRef(m, "Method", (PyObject *)&MethodType) < 0 ||
        PyModule_AddObjectRef(m, "Calm", (PyObject *)&CalmType) < 0 ||
        PyModule_AddObjectRef(m, "FastFetch", (PyObject *)&FastFetchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
