'use strict'
/**
 * stream-seq-worker: the consumer loop of stream_seq (doc/consumers.md)
 * for node-postgres, as a library.
 *
 * GroupWorker works a share of a consumer group's slots; Worker works a
 * plain consumer.  Both keep no session state between transactions (no
 * named prepared statements, no LISTEN, no temporary tables, no SET), so
 * they run through pgbouncer in transaction mode.
 *
 * Numbers (seq, token, position, horizon) are BigInt everywhere, and so
 * are the bigint columns of the rows it hands to the handler.
 */

const net = require('net')
const pg = require('pg')

const LEASE_LOST = 'SS001'
const RETRY_PAGE = new Set(['40001', '40P01'])
const QUERY_CANCELED = '57014'
const INT8 = 20

/**
 * Errors that trying again cannot mend, so the worker stops on them
 * (run() rejects): authentication (28P01, 28000), a database, schema,
 * table, column, function or consumer that does not exist (3D000, 3F000,
 * 42P01, 42703, 42883, 42704), a table that is not a stream (42809), no
 * privilege (42501), and a consumer that is a group where a plain one is
 * needed or the other way round (55000, told apart by its message: 55000
 * is also what a standby that does not know its horizon yet answers).
 */
const PERMANENT = new Set(['28P01', '28000', '3D000', '3F000', '42P01', '42703', '42883', '42704', '42809', '42501'])
/**
 * The errors of the handler's own SQL that no row can get past (a table
 * or column it uses that does not exist): they stop the worker instead of
 * parking every row.  Not 42501: a row-level security policy refuses
 * single rows with it.
 */
const HANDLER_PERMANENT = new Set(['3F000', '42P01', '42703', '42883', '42704'])

function permanent (err) {
  const c = err && err.code
  if (PERMANENT.has(c)) return true
  return c === '55000' && / is (not )?a group$/.test(String(err.message))
}

const NAMESPACE = 'stream-seq-worker'
const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }

/**
 * What the DEBUG environment variable says of a namespace, in the syntax
 * of the debug package: names separated by commas or spaces, "*" any
 * text, a leading "-" skips (and wins).  'enabled', 'skipped' or null.
 */
function debugSetting (value, ns) {
  let result = null
  for (const part of String(value || '').split(/[\s,]+/)) {
    if (!part) continue
    const skip = part[0] === '-'
    const pattern = (skip ? part.slice(1) : part)
      .replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*')
    if (new RegExp(`^${pattern}$`).test(ns)) {
      if (skip) return 'skipped'
      result = 'enabled'
    }
  }
  return result
}

/**
 * The logger of a worker, an object with debug, info, warn and error,
 * each taking one line of text:
 *  - opts.logger an object with (some of) those methods (console, pino,
 *    winston, bunyan): its methods, a missing one dropped;
 *  - opts.logger a function (a debug instance, debug('stream-seq-worker')):
 *    every line to it, warnings and errors marked so;
 *  - opts.logger false or null: nothing;
 *  (an exception in the application's logger is ignored)
 *  - otherwise the built-in one, on stderr, from opts.logLevel, else
 *    'debug' when DEBUG names stream-seq-worker, nothing when DEBUG skips
 *    it (-stream-seq-worker), else 'info'.
 */
function makeLogger (opts) {
  const none = () => {}
  // an exception in the application's logger must not stop the worker
  const safe = (f) => (m) => { try { f(m) } catch (_) { } }
  const l = opts.logger
  if (l === false || l === null) return { debug: none, info: none, warn: none, error: none }
  if (typeof l === 'function') {
    return {
      debug: safe((m) => l(m)),
      info: safe((m) => l(m)),
      warn: safe((m) => l(`warning: ${m}`)),
      error: safe((m) => l(`error: ${m}`))
    }
  }
  if (l !== undefined) {
    if (typeof l !== 'object') throw new TypeError('logger must be an object with debug, info, warn and error, a function, or false')
    const out = {}
    for (const k of ['debug', 'info', 'warn', 'error']) out[k] = typeof l[k] === 'function' ? safe((m) => l[k](m)) : none
    return out
  }
  let level = opts.logLevel
  if (level === undefined) {
    const d = debugSetting(process.env.DEBUG, NAMESPACE)
    level = d === 'enabled' ? 'debug' : d === 'skipped' ? 'silent' : 'info'
  }
  if (!(level in LEVELS)) throw new TypeError(`logLevel must be one of ${Object.keys(LEVELS).join(', ')}`)
  const out = {}
  for (const k of ['debug', 'info', 'warn', 'error']) {
    out[k] = LEVELS[k] < LEVELS[level]
      ? none
      : (m) => process.stderr.write(`${new Date().toISOString()} ${NAMESPACE} ${k} ${m}\n`)
  }
  return out
}

/** An error's text for a log line: its message, SQLSTATE or code, and hint. */
function describe (err) {
  if (!err) return String(err)
  const msg = String(err.message || err).split('\n')[0]
  const code = err.code ? ` (${/^[0-9A-Z]{5}$/.test(err.code) ? 'SQLSTATE ' : ''}${err.code})` : ''
  return msg + code + (err.hint ? `; hint: ${err.hint}` : '')
}

/** Slot numbers as ranges: "0-3,6", or "none". */
function ranges (slots) {
  if (slots.length === 0) return 'none'
  const s = [...slots].sort((a, b) => a - b)
  const out = []
  let first = s[0]
  let prev = s[0]
  for (const x of s.slice(1).concat([null])) {
    if (x === prev + 1) { prev = x; continue }
    out.push(first === prev ? `${first}` : `${first}-${prev}`)
    first = prev = x
  }
  return out.join(',')
}

/** A duration for a log line: "250 ms", "27.9 s". */
const seconds = (ms) => (ms < 1000 ? `${Math.max(Math.round(ms), 0)} ms` : `${Math.round(ms / 100) / 10} s`)

/**
 * The parsers of the rows' columns: bigint as BigInt (node-postgres gives
 * a string; a Number is exact only up to 2^53), every other type as
 * node-postgres parses it.  Used for the reads only.
 */
const ROW_TYPES = {
  getTypeParser (oid, format) {
    if (oid === INT8 && format !== 'binary') return (v) => BigInt(v)
    return pg.types.getTypeParser(oid, format)
  }
}

/** The request code of a cancel request (protocol "CancelRequest"). */
const CANCEL_REQUEST_CODE = 80877102

/**
 * Sends a cancel request for the query client is running, to the server
 * (or pooler) it is connected to, by the connection's cancel key, and
 * resolves once the other side has closed the socket, which it does when
 * it has handled the request (at most 5 s).  Waiting for that matters:
 * pgbouncer before 1.20 exits on a cancel connection that its client
 * closes first (pgbouncer issue 801), as a process that stops right after
 * asking does.  Sent in clear, as libpq does.
 */
function sendCancel (client) {
  return new Promise((resolve) => {
    const host = client.host || 'localhost'
    const sock = host.startsWith('/')
      ? net.connect(`${host}/.s.PGSQL.${client.port}`)
      : net.connect(client.port, host)
    const timer = setTimeout(() => sock.destroy(), 5000)
    sock.on('connect', () => {
      const req = Buffer.alloc(16)
      req.writeInt32BE(16, 0)
      req.writeInt32BE(CANCEL_REQUEST_CODE, 4)
      req.writeInt32BE(client.processID, 8)
      req.writeInt32BE(client.secretKey, 12)
      sock.write(req)
    })
    sock.on('error', () => {})
    sock.on('close', () => { clearTimeout(timer); resolve() })
  })
}

/** The columns of the due() read that are not the table's own. */
const DUE_SEQ = 'stream_seq.seq'
const DUE_GONE = 'stream_seq.gone'
const DUE_ATTEMPTS = 'stream_seq.attempts'
const DUE_REASON = 'stream_seq.reason'

/**
 * @typedef {Object} Row
 * @property {bigint} seq       the row's number
 * @property {Object} row       the stream table's row: its columns by name,
 *   bigint as BigInt, the others as node-postgres parses them
 * @property {number} attempts  failures behind it (0 unless handed back by due())
 * @property {string|null} reason the reason of its last failure (due() only)
 */

/**
 * @typedef {Object} Context
 * @property {import('pg').Client} client the connection, inside the
 *   transaction that advances past the row: do the work with it
 * @property {string} worker
 * @property {number|null} slot  the slot (null: a retry from due(), or a plain consumer)
 * @property {bigint|null} token
 * @property {boolean} retry     true for a row handed back by due()
 * @property {AbortSignal} signal
 */

/**
 * @typedef {Object} Hooks  each optional; an exception in a hook is ignored
 * @property {(info: {worker: string}) => void} [connect]
 * @property {(info: {slots: {slot: number, token: bigint}[], seen: bigint}) => void} [claim]
 * @property {(info: {slot: number|null, rows: number, applied: number, parked: number, first: bigint, last: bigint, ms: number, retry: boolean}) => void} [page]
 * @property {(info: {seq: bigint, error: Error, attempts: number}) => void} [park]
 * @property {(info: {after: bigint, ms: number}) => void} [wait]
 * @property {(info: {code: string, slot: number|null}) => void} [retry]
 * @property {(error: Error, info: {phase: string}) => void} [error]
 * @property {(info: {worker: /**
 * @typedef {Object} Options
 * @property {string|import('pg').ClientConfig} [connection]  given to new
 *   pg.Client() (undefined or '': node-postgres's PGHOST, PGDATABASE, ... variables)
 * @property {string} stream     the stream table (a regclass text: 'events', 'app.events')
 * @property {string} consumer
 * @property {string} [worker]   this worker's name (GroupWorker: required, one per process)
 * @property {(row: Row, ctx: Context) => Promise<void>|void} [handleRow]
 * @property {(rows: Row[], ctx: Context) => Promise<void>|void} [handlePage]
 * @property {number} [pageSize=100]
 * @property {number} [leaseMs=30000]     the lease claim() asks for
 * @property {number} [renewMs]           claim again after this long (default leaseMs / 3)
 * @property {number} [waitMs=10000]      the longest wait() (kept below renewMs)
 * @property {number} [dueMs=1000]        take due retries at most this often (0: every loop)
 * @property {number} [dueRows=100]
 * @property {number} [reconnectMs=100]   first pause before trying again (doubles, at most 5 s)
 * @property {number} [connectAttempts=10] a worker that never reached the
 *   database stops after this many failed attempts (Infinity: never)
 * @property {number} [progressMs=30000]  log a progress line this often (0: never)
 * @property {Object|Function|false} [logger]  see makeLogger()
 * @property {'debug'|'info'|'warn'|'error'|'silent'} [logLevel]  of the built-in logger
 * @property {AbortSignal} [signal]
 * @property {Hooks} [hooks]
 */

/** A promise that resolves after ms, or at once when signal aborts. */
function pause (ms, signal) {
  return new Promise((resolve) => {
    if (signal && signal.aborted) return resolve()
    const t = setTimeout(done, ms)
    function done () {
      clearTimeout(t)
      if (signal) signal.removeEventListener('abort', done)
      resolve()
    }
    if (signal) signal.addEventListener('abort', done, { once: true })
  })
}

/** Whether err means the connection (or the server) is gone. */
function connectionLost (err) {
  const c = err && err.code
  if (typeof c !== 'string' || !/^[0-9A-Z]{5}$/.test(c)) return true // ECONNRESET, "Connection terminated", ...
  return c.startsWith('08') || c === '57P01' || c === '57P02' || c === '57P03' || c === '53300'
}

/** The text of a number for a query parameter. */
const num = (v) => (v === null || v === undefined ? null : String(v))

class BaseWorker {
  /** @param {Options} opts */
  constructor (opts) {
    if (!opts || !opts.stream || !opts.consumer) throw new TypeError('stream and consumer are required')
    if (!opts.handleRow === !opts.handlePage) throw new TypeError('give one of handleRow and handlePage')
    this.opts = opts
    this.stream = opts.stream
    this.consumer = opts.consumer
    this.name = opts.worker || ''
    this.pageSize = opts.pageSize || 100
    this.leaseMs = opts.leaseMs || 30000
    this.renewMs = opts.renewMs || Math.floor(this.leaseMs / 3)
    this.waitMs = Math.min(opts.waitMs || 10000, this.renewMs)
    this.dueMs = opts.dueMs === undefined ? 1000 : opts.dueMs
    this.dueRows = opts.dueRows || 100
    this.reconnectMs = opts.reconnectMs || 100
    this.connectAttempts = opts.connectAttempts === undefined ? 10 : opts.connectAttempts
    this.progressMs = opts.progressMs === undefined ? 30000 : opts.progressMs
    this.hooks = opts.hooks || {}
    this.log = makeLogger(opts)
    /**
     * counters since run() started: rows applied (committed with the
     * handler's work, first deliveries and retries), rows parked (handler
     * failures, and retries whose row is gone), rows retried (handed back
     * by due()), rows read from pages (first deliveries: applied or
     * parked), pages, waits, reconnects
     */
    this.stats = { applied: 0, parked: 0, retried: 0, rows: 0, pages: 0, waits: 0, reconnects: 0 }
    this._client = null
    this._broken = false
    this._waiting = false
    this._cancelling = null
    this._nextDue = 0
    this._reads = null
    this._reached = false
    this._lostAt = null
    this._nextProgress = 0
    this._lastProgress = null
  }

  /** The worker's name in log lines. */
  get _label () { return this.name ? `worker ${this.name}` : `consumer ${this.consumer}` }

  _hook (name, ...args) {
    const f = this.hooks[name]
    if (f) { try { f(...args) } catch (_) { /* a hook must not stop the worker */ } }
  }

  async _connect () {
    if (this._client && !this._broken) return this._client
    await this._disconnect()
    // an empty string (DATABASE_URL set but empty) means none, as for
    // libpq: the PG* variables; pg would take it for a URL of host "base"
    const client = new pg.Client(this.opts.connection || undefined)
    this._broken = false
    client.on('error', (err) => {
      this._broken = true
      this.log.debug(`${this._label}: connection error while idle: ${describe(err)}`)
      this._hook('error', err, { phase: 'idle' })
    })
    client.on('end', () => { this._broken = true })
    try {
      await client.connect()
    } catch (err) {
      this._broken = true
      client.end().catch(() => {})
      throw err
    }
    this._client = client
    this.log.debug(`${this._label}: connected`)
    this._hook('connect', { worker: this.name })
    return client
  }

  async _disconnect () {
    const c = this._client
    this._client = null
    this._reads = null
    if (c) await c.end().catch(() => {})
  }

  /** One statement, unnamed (no server-side prepared statement is kept). */
  async _q (text, values) {
    return this._client.query(text, values)
  }

  /** A read: as _q, with the rows' columns typed by ROW_TYPES. */
  async _read (text, values) {
    return this._client.query({ text, values, types: ROW_TYPES })
  }

  /**
   * The typed reads of the stream (read_slot_rows(), read_rows(), due()
   * made the table's row type again), built from the table's qualified
   * name and its stream column, looked up once per connection and again
   * after any error (the table may have been renamed).
   */
  async _statements () {
    if (this._reads) return this._reads
    const res = await this._q(
      `SELECT format('%I.%I', n.nspname, c.relname) AS t, s.seq_column AS col
         FROM stream_seq.streams s JOIN pg_class c ON c.oid = s.stream
         JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE s.stream = $1::regclass`, [this.stream])
    if (res.rows.length === 0) {
      const err = new Error(`table "${this.stream}" is not a stream table`)
      err.code = '42809'
      throw err
    }
    if (this._lostAt !== null) {
      this.log.info(`${this._label}: connected again after ${seconds(Date.now() - this._lostAt)}`)
      this._lostAt = null
    }
    this._reached = true
    const { t, col } = res.rows[0]    // t: quoted by format('%I.%I')
    this._reads = {
      col,
      readSlot: `SELECT * FROM stream_seq.read_slot_rows(NULL::${t}, $1, $2, $3, $4)`,
      read: `SELECT * FROM stream_seq.read_rows(NULL::${t}, $1, $2)`,
      due: `SELECT d.seq AS "${DUE_SEQ}", d."row" IS NULL AS "${DUE_GONE}",
                   d.attempts AS "${DUE_ATTEMPTS}", d.reason AS "${DUE_REASON}", r.*
              FROM stream_seq.due($1, $2, $3) d,
                   LATERAL jsonb_populate_record(NULL::${t}, d."row") r
             ORDER BY d.seq`
    }
    return this._reads
  }

  /** The handler's rows of a typed read of the table's columns. */
  _rows (res) {
    const col = this._reads.col
    return res.rows.map((row) => ({ seq: row[col], row, attempts: 0, reason: null }))
  }

  async _rollback () {
    if (this._broken || !this._client) return
    try { await this._q('ROLLBACK') } catch (err) { this._broken = true }
  }

  /**
   * Cancels a wait() in progress (through the pooler, by the cancel key);
   * run() waits for the request to be handled before it returns.
   */
  _cancelWait () {
    const c = this._client
    if (!c || !this._waiting || c.processID === null) return
    this._cancelling = sendCancel(c)
  }

  /** Runs the handler over rows. */
  async _handle (rows, ctx) {
    if (this.opts.handlePage) return this.opts.handlePage(rows, ctx)
    for (const r of rows) await this.opts.handleRow(r, ctx)
  }

  /** Whether an error from the handler must roll the whole page back. */
  _fatal (err) {
    return this._broken || (err && (err.code === LEASE_LOST || RETRY_PAGE.has(err.code) ||
                                      HANDLER_PERMANENT.has(err.code)))
  }

  /**
   * Applies rows in the current transaction: the page under one savepoint;
   * if the handler fails, again row by row under savepoints of their own,
   * parking each row that fails (with the consumer's retry policy, a parked
   * row comes back through due(); at its maximum it is a dead letter).
   * Returns the rows parked, {seq, error, attempts}, to be counted and
   * reported once the transaction commits.
   */
  async _apply (rows, ctx) {
    await this._q('SAVEPOINT stream_seq_page')
    try {
      await this._handle(rows, ctx)
      await this._q('RELEASE SAVEPOINT stream_seq_page')
      return []
    } catch (err) {
      if (this._fatal(err)) throw err
      await this._q('ROLLBACK TO SAVEPOINT stream_seq_page')
      await this._q('RELEASE SAVEPOINT stream_seq_page')
    }
    const parked = []
    for (const r of rows) {
      await this._q('SAVEPOINT stream_seq_row')
      try {
        await this._handle([r], ctx)
        await this._q('RELEASE SAVEPOINT stream_seq_row')
      } catch (err) {
        if (this._fatal(err)) throw err
        await this._q('ROLLBACK TO SAVEPOINT stream_seq_row')
        await this._q('RELEASE SAVEPOINT stream_seq_row')
        const reason = String((err && err.message) || err).slice(0, 500)
        await this._q('SELECT stream_seq.park($1, $2, $3, $4)',
          [this.stream, this.consumer, num(r.seq), reason])
        parked.push({ seq: r.seq, error: err, attempts: r.attempts + 1 })
      }
    }
    return parked
  }

  /** Counts and reports the rows a committed transaction parked. */
  _parked (parked) {
    this.stats.parked += parked.length
    for (const p of parked) {
      this.log.warn(`${this._label}: parked row ${p.seq} (attempt ${p.attempts}): ${describe(p.error)}`)
      this._hook('park', p)
    }
  }

  /**
   * Takes the consumer's due retries, at most every dueMs, and again at
   * once after a call that handed rows back and committed: under per-key
   * order a held key comes back one row per call, its next row due as
   * soon as the previous one committed, so waiting dueMs between calls
   * would drain it at one row per dueMs. At most a page's worth of rows
   * before the slots get their turn; if the last call still had rows, the
   * next loop takes due() again without waiting dueMs.
   */
  async _due (signal) {
    if (Date.now() < this._nextDue) return 0
    this._nextDue = Date.now() + this.dueMs
    let total = 0
    let n
    do {
      n = await this._dueOnce(signal)
      total += n
    } while (n > 0 && total < this.pageSize && !signal.aborted)
    if (n > 0) this._nextDue = 0
    return total
  }

  /**
   * One due() call, in an explicit transaction of its own with the work
   * (in autocommit due() would resolve them at once).
   */
  async _dueOnce (signal) {
    const t0 = Date.now()
    const st = await this._statements()
    await this._q('BEGIN')
    try {
      const res = await this._read(st.due, [this.stream, this.consumer, this.dueRows])
      if (res.rows.length === 0) { await this._q('COMMIT'); return 0 }
      const rows = []
      const parked = []
      for (const x of res.rows) {
        const seq = x[DUE_SEQ]
        const meta = { gone: x[DUE_GONE], attempts: x[DUE_ATTEMPTS], reason: x[DUE_REASON] }
        for (const k of [DUE_SEQ, DUE_GONE, DUE_ATTEMPTS, DUE_REASON]) delete x[k]
        if (meta.gone) {
          // retention removed the row: nothing to hand over; park it again
          await this._q('SELECT stream_seq.park($1, $2, $3, $4)',
            [this.stream, this.consumer, num(seq), 'row removed by retention'])
          parked.push({ seq, error: new Error('row removed by retention'), attempts: meta.attempts + 1 })
          continue
        }
        rows.push({ seq, row: x, attempts: meta.attempts, reason: meta.reason })
      }
      let refused = []
      if (rows.length > 0) refused = await this._apply(rows, { client: this._client, worker: this.name, slot: null, token: null, retry: true, signal })
      await this._q('COMMIT')
      this.stats.retried += rows.length
      this.stats.applied += rows.length - refused.length
      this._parked(parked.concat(refused))
      if (rows.length > 0) {
        this.log.debug(`${this._label}: retried ${rows.length} rows (${rows[0].seq} to ${rows[rows.length - 1].seq}), ${refused.length} parked again`)
        this._hook('page', { slot: null, rows: rows.length, applied: rows.length - refused.length, parked: refused.length, first: rows[0].seq, last: rows[rows.length - 1].seq, ms: Date.now() - t0, retry: true })
      }
      return res.rows.length
    } catch (err) {
      await this._rollback()
      throw err
    }
  }

  /** Sleeps in wait() until a row after "after" is readable, or ms pass. */
  async _wait (after, ms, signal) {
    ms = Math.min(ms, this.progressMs > 0 ? this._nextProgress - Date.now() : Infinity)
    if (signal.aborted || ms <= 0) return
    const t0 = Date.now()
    this._waiting = true
    try {
      await this._q('SELECT stream_seq.wait($1, $2, $3::interval)',
        [this.stream, num(after), `${ms} milliseconds`])
    } catch (err) {
      if (!(signal.aborted && err.code === QUERY_CANCELED)) throw err
    } finally {
      this._waiting = false
    }
    this.stats.waits++
    this._hook('wait', { after, ms: Date.now() - t0 })
  }

  /**
   * Logs the progress line every progressMs: rows applied and parked
   * since the last one and in all, and how far behind it is (a group's
   * worker: the rows waiting on its slots; a plain consumer: its lag, the
   * numbers between its position and the horizon).
   * Between transactions only, so that it never shares one.
   */
  async _progress () {
    if (this.progressMs <= 0 || Date.now() < this._nextProgress) return
    const first = this._lastProgress === null
    this._nextProgress = Date.now() + this.progressMs
    const prev = this._lastProgress || this.stats
    this._lastProgress = { ...this.stats }
    if (first) return
    let lag = null
    try {
      lag = await this._lag()
    } catch (err) {
      if (this._broken || connectionLost(err)) throw err
      this.log.debug(`${this._label}: lag not read: ${describe(err)}`)
    }
    const s = this.stats
    this.log.info(`${this._label}: progress: applied ${s.applied - prev.applied} rows, ` +
      `parked ${s.parked - prev.parked} in the last ${seconds(this.progressMs)} ` +
      `(${s.applied} and ${s.parked} since the start)${lag === null ? '' : `, ${lag}`}`)
  }

  /**
   * Runs the worker until signal aborts: resolves (with this.stats) once
   * the page in progress is finished and the slots are released.  Lost
   * connections are reopened and other errors tried again, after a pause
   * that doubles up to 5 s, each logged as a warning; a permanent error
   * (see PERMANENT), or connectAttempts failures before the database was
   * ever reached, stops it: the slots are released and run() rejects with
   * the error.
   * @param {{signal?: AbortSignal}} [arg]
   */
  async run (arg = {}) {
    const signal = arg.signal || this.opts.signal || new AbortController().signal
    const onAbort = () => this._cancelWait()
    signal.addEventListener('abort', onAbort)
    let failures = 0
    let fatal = null
    this._nextProgress = 0
    this._lastProgress = null
    try {
      while (!signal.aborted) {
        try {
          await this._connect()
          await this._loop(signal, () => { failures = 0 })
        } catch (err) {
          if (signal.aborted && err.code === QUERY_CANCELED) break
          const lost = this._broken || connectionLost(err)
          this._hook('error', err, { phase: lost ? 'connection' : 'loop' })
          if (permanent(err)) {
            fatal = err
            this.log.error(`${this._label}: stopping: ${describe(err)}`)
            break
          }
          failures++
          if (!this._reached && failures >= this.connectAttempts) {
            fatal = err
            this.log.error(`${this._label}: stopping: could not reach the database in ${failures} attempts: ${describe(err)}`)
            break
          }
          const ms = Math.min(this.reconnectMs * 2 ** (failures - 1), 5000)
          if (lost) {
            this.stats.reconnects++
            await this._disconnect()
            this._lostConnection()
            if (this._reached && this._lostAt === null) this._lostAt = Date.now()
            this.log.warn(`${this._label}: ${this._reached ? 'connection lost' : `could not connect (attempt ${failures} of ${this.connectAttempts})`}: ` +
              `${describe(err)}; trying again in ${seconds(ms)}`)
          } else {
            this._reads = null
            this.log.warn(`${this._label}: ${describe(err)}; trying again in ${seconds(ms)}`)
          }
          await pause(ms, signal)
        }
      }
      await this._stop(fatal)
    } finally {
      signal.removeEventListener('abort', onAbort)
      if (this._cancelling) await this._cancelling
      await this._disconnect()
    }
    if (fatal) throw fatal
    return this.stats
  }

  _lostConnection () { }

  async _stop (fatal) {
    this._stopped(fatal, '')
  }

  _stopped (fatal, what) {
    const s = this.stats
    this.log.info(`${this._label}: stopped${fatal ? ' on the error' : ''}${what}; ` +
      `applied ${s.applied} rows, parked ${s.parked}`)
  }
}

/**
 * A worker of a consumer group: claims its share of the slots with a
 * lease, renews it, and for each slot held reads a page, applies it and
 * advances the slot past it in one transaction.
 */
class GroupWorker extends BaseWorker {
  /** @param {Options} opts */
  constructor (opts) {
    super(opts)
    if (!this.name) throw new TypeError('worker (a name of its own) is required')
    /** @type {{slot: number, token: bigint}[]} */
    this.slots = []
    this._renewAt = 0
    this._started = false
    this._held = null       // the slots of the last claim, as text
    this._short = false     // the last claim gave fewer slots than the share
    this._waitNoted = ''    // the holders last named in a lease-wait line
  }

  _lostConnection () { this._renewAt = 0 }

  async _claim () {
    // the horizon in the same statement as the claim, so before the reads
    // that follow: if they find nothing, wait() after it misses nothing
    const res = await this._q(
      `SELECT (stream_seq.horizon($1) - 1)::text AS seen,
              ARRAY(SELECT c.slot || ':' || c.token
                      FROM stream_seq.claim($1, $2, $3, $4::interval) c ORDER BY c.slot) AS slots`,
      [this.stream, this.consumer, this.name, `${this.leaseMs} milliseconds`])
    const r = res.rows[0]
    this.slots = r.slots.map((s) => { const [a, b] = s.split(':'); return { slot: Number(a), token: BigInt(b) } })
    this._renewAt = Date.now() + this.renewMs
    const seen = BigInt(r.seen)
    const held = ranges(this.slots.map((s) => s.slot))
    if (held !== this._held || this._short) await this._slotsChanged(held)
    this._hook('claim', { slots: this.slots, seen })
    return seen
  }

  /**
   * After a claim that changed the slots held (or that gave fewer than
   * the share): logs the slots, the first time as the start line, and
   * when the share is held by others whose lease has not ended, who and
   * until when (a worker that stopped without releasing, or was killed,
   * holds its slots until its lease ends), and claims again when the
   * first of those leases ends rather than at the next renewal.
   */
  async _slotsChanged (held) {
    const res = await this._q(
      `SELECT slot, worker, lease_until FROM stream_seq.consumer_slots
        WHERE stream = $1::regclass AND consumer = $2 ORDER BY slot`, [this.stream, this.consumer])
    const total = res.rows.length
    const others = new Map()
    for (const s of res.rows) {
      if (s.worker === null || s.worker === this.name || s.lease_until === null) continue
      const o = others.get(s.worker) || { slots: [], until: s.lease_until }
      o.slots.push(s.slot)
      if (s.lease_until > o.until) o.until = s.lease_until
      others.set(s.worker, o)
    }
    const live = others.size + 1
    const share = Math.floor(total / live)
    const over = [...others].filter(([, o]) => o.slots.length > Math.ceil(total / live))
    this._short = this.slots.length < share && over.length > 0
    if (!this._started) {
      this._started = true
      this.log.info(`${this._label} started: stream ${this.stream}, group ${this.consumer}, ` +
        `slots ${held} of ${total} (lease ${seconds(this.leaseMs)})`)
    } else if (held !== this._held) {
      this.log.info(`${this._label}: slots ${held} of ${total} (were ${this._held})`)
    }
    this._held = held
    if (!this._short) { this._waitNoted = ''; return }
    // claim again as soon as the first of those leases ends
    const ends = Math.min(...over.map(([, o]) => o.until.getTime()))
    this._renewAt = Math.max(Math.min(this._renewAt, ends + 100), Date.now() + 100)
    const noted = over.map(([w, o]) => `${w}@${o.until.getTime()}`).join(' ')
    if (noted === this._waitNoted) return
    this._waitNoted = noted
    for (const [w, o] of over) {
      this.log.info(`${this._label}: waiting for slots ${ranges(o.slots)}, held by worker ${w} ` +
        `until its lease ends at ${o.until.toISOString()} (in ${seconds(o.until - Date.now())}), ` +
        'or until it gives them back')
    }
  }

  /** The rows waiting on the slots held (counted up to 100,000 a slot). */
  async _lag () {
    const res = await this._q(
      `SELECT sum(backlog)::text AS n FROM stream_seq.consumer_slots
        WHERE stream = $1::regclass AND consumer = $2 AND worker = $3`,
      [this.stream, this.consumer, this.name])
    return res.rows[0].n === null ? null : `backlog ${res.rows[0].n} rows on its slots`
  }

  async _loop (signal, ok) {
    while (!signal.aborted) {
      let seen
      if (Date.now() >= this._renewAt) seen = await this._claim()
      else seen = BigInt((await this._q('SELECT (stream_seq.horizon($1) - 1)::text AS seen', [this.stream])).rows[0].seen)
      await this._progress()
      let handled = await this._due(signal)
      for (const { slot, token } of this.slots) {
        if (signal.aborted) break
        try {
          handled += await this._page(slot, token, signal)
        } catch (err) {
          if (this._broken || !err.code) throw err
          if (err.code === LEASE_LOST) {
            this._renewAt = 0
            handled++
            this.log.warn(`${this._label}: slot ${slot} changed hands (${describe(err)}): page rolled back, claiming again`)
            this._hook('retry', { code: err.code, slot })
            break
          }
          if (RETRY_PAGE.has(err.code)) {
            handled++
            this.log.warn(`${this._label}: slot ${slot}: ${describe(err)}: page rolled back, reading it again`)
            this._hook('retry', { code: err.code, slot })
            continue
          }
          throw err
        }
      }
      if (handled === 0) {
        const until = Math.min(this._renewAt, this.dueMs ? this._nextDue : Infinity)
        await this._wait(seen, Math.min(this.waitMs, until - Date.now()), signal)
      }
      ok()
    }
  }

  /** One page of a slot, applied and advanced past in one transaction. */
  async _page (slot, token, signal) {
    const t0 = Date.now()
    const st = await this._statements()
    await this._q('BEGIN')
    try {
      const res = await this._read(st.readSlot, [this.consumer, slot, num(token), this.pageSize])
      if (res.rows.length === 0) { await this._q('COMMIT'); return 0 }
      const rows = this._rows(res)
      const parked = await this._apply(rows, { client: this._client, worker: this.name, slot, token, retry: false, signal })
      const last = rows[rows.length - 1].seq
      await this._q('SELECT stream_seq.advance_slot($1, $2, $3, $4, $5)',
        [this.stream, this.consumer, slot, num(token), num(last)])
      await this._q('COMMIT')
      this.stats.rows += rows.length
      this.stats.applied += rows.length - parked.length
      this.stats.pages++
      this._parked(parked)
      this.log.debug(`${this._label}: slot ${slot}: ${rows.length} rows (${rows[0].seq} to ${last}), ${parked.length} parked`)
      this._hook('page', { slot, rows: rows.length, applied: rows.length - parked.length, parked: parked.length, first: rows[0].seq, last, ms: Date.now() - t0, retry: false })
      return rows.length
    } catch (err) {
      await this._rollback()
      throw err
    }
  }

  /**
   * Gives the slots back (a fresh connection if the last one was lost),
   * so that the other workers take them at their next claim rather than
   * when the lease ends.
   */
  async _stop (fatal) {
    if (!this._reached) return this._stopped(fatal, '')
    let err
    for (let i = 0; i < 3; i++) {
      try {
        await this._connect()
        await this._q('SELECT stream_seq.release($1, $2, $3)', [this.stream, this.consumer, this.name])
        const held = ranges(this.slots.map((s) => s.slot))
        this.slots = []
        this._hook('release', { worker: this.name })
        return this._stopped(fatal, held === 'none' ? '' : `, slots ${held} released`)
      } catch (e) {
        err = e
        this._hook('error', e, { phase: 'release' })
        if (this._broken || connectionLost(e)) await this._disconnect()
        if (permanent(e)) break
        await pause(100 * (i + 1))
      }
    }
    this.log.warn(`${this._label}: could not release the slots (${describe(err)}): ` +
      'the other workers take them over when the lease ends')
    this._stopped(fatal, '')
  }
}

/**
 * A worker of a plain consumer: reads a page after the consumer's
 * position, applies it and advances past it in one transaction.  Two
 * workers of one consumer take turns (the second gets SS001 and reads
 * again); use a group to share the work.
 */
class Worker extends BaseWorker {
  async _loop (signal, ok) {
    if (!this._started) {
      await this._statements()
      // the consumer's position, and that the consumer exists and is not a group
      const res = await this._q(
        `SELECT position::text AS position, slots FROM stream_seq.consumers
          WHERE stream = $1::regclass AND consumer = $2`, [this.stream, this.consumer])
      if (res.rows.length === 0) {
        const err = new Error(`consumer "${this.consumer}" of stream table "${this.stream}" does not exist`)
        err.code = '42704'
        throw err
      }
      if (res.rows[0].slots !== null && res.rows[0].slots > 0) {
        const err = new Error(`consumer "${this.consumer}" of stream table "${this.stream}" is a group`)
        err.code = '55000'
        err.hint = 'Use GroupWorker for a group.'
        throw err
      }
      this._started = true
      this.log.info(`${this._label} started: stream ${this.stream}, plain consumer ${this.consumer}, ` +
        `after ${res.rows[0].position}`)
    }
    while (!signal.aborted) {
      await this._progress()
      let handled = await this._due(signal)
      const r = await this._page(signal)
      handled += r.rows
      if (handled === 0) {
        const until = this.dueMs ? this._nextDue - Date.now() : this.waitMs
        await this._wait(r.seen, Math.min(this.waitMs, until), signal)
      }
      ok()
    }
  }

  /** The numbers between the position and the horizon. */
  async _lag () {
    const res = await this._q(
      `SELECT lag::text AS lag FROM stream_seq.consumers WHERE stream = $1::regclass AND consumer = $2`,
      [this.stream, this.consumer])
    return res.rows.length === 0 || res.rows[0].lag === null ? null : `lag ${res.rows[0].lag}`
  }

  async _page (signal) {
    const t0 = Date.now()
    const st = await this._statements()
    await this._q('BEGIN')
    try {
      // the horizon before the read: every row below it is visible to it
      const seen = BigInt((await this._q('SELECT (stream_seq.horizon($1) - 1)::text AS seen', [this.stream])).rows[0].seen)
      const res = await this._read(st.read, [this.consumer, this.pageSize])
      if (res.rows.length === 0) { await this._q('COMMIT'); return { rows: 0, seen } }
      const rows = this._rows(res)
      const parked = await this._apply(rows, { client: this._client, worker: this.name, slot: null, token: null, retry: false, signal })
      const last = rows[rows.length - 1].seq
      await this._q('SELECT stream_seq.advance($1, $2, $3)', [this.stream, this.consumer, num(last)])
      await this._q('COMMIT')
      this.stats.rows += rows.length
      this.stats.applied += rows.length - parked.length
      this.stats.pages++
      this._parked(parked)
      this.log.debug(`${this._label}: ${rows.length} rows (${rows[0].seq} to ${last}), ${parked.length} parked`)
      this._hook('page', { slot: null, rows: rows.length, applied: rows.length - parked.length, parked: parked.length, first: rows[0].seq, last, ms: Date.now() - t0, retry: false })
      return { rows: rows.length, seen }
    } catch (err) {
      await this._rollback()
      if (!this._broken && err.code && (err.code === LEASE_LOST || RETRY_PAGE.has(err.code))) {
        this.log.warn(`${this._label}: ${describe(err)}: page rolled back, reading it again`)
        this._hook('retry', { code: err.code, slot: null })
        return { rows: 1, seen: 0n }
      }
      throw err
    }
  }
}

/**
 * The lowest and highest number of this session's last transaction that
 * committed rows to the stream (stream_seq.last_numbers(), 0.6.0), as
 * BigInt, or nulls.  The answer is kept in the server backend: call it on
 * a connection of your own (a direct connection, or session pooling), not
 * through a pooler in transaction mode.
 * @param {import('pg').ClientBase} client
 * @param {string} stream
 * @returns {Promise<{first: bigint|null, last: bigint|null}>}
 */
async function lastNumbers (client, stream) {
  const res = await client.query(
    'SELECT first::text AS first, last::text AS last FROM stream_seq.last_numbers($1)', [stream])
  const r = res.rows[0]
  return { first: r.first === null ? null : BigInt(r.first), last: r.last === null ? null : BigInt(r.last) }
}

module.exports = { GroupWorker, Worker, lastNumbers, LEASE_LOST, PERMANENT }
