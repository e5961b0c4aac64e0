// apps.js PORT USER: the recipes of doc/applications.md for node-postgres,
// Knex, Sequelize and TypeORM, run by test/t/039_applications.pl through
// pgbouncer in transaction mode on 127.0.0.1:PORT, one stream table each
// (ev_pg, ev_knex, ev_sequelize, ev_typeorm).  Prints one line per task
// ("stack task result"), which the test compares.  The test installs the
// packages of package.json outside the source tree and sets NODE_PATH.
'use strict';

const pg = require('pg');

const [port, user] = process.argv.slice(2);
const url = `postgresql://${user}@127.0.0.1:${port}/postgres`;
const DDL = (t) => [
  `CREATE TABLE ${t} (id bigint PRIMARY KEY, customer_id int NOT NULL, payload text)`,
  `SELECT stream_seq.enable('${t}')`,
];
const PAGE = (t) => `SELECT seq FROM ${t} WHERE seq > $1 ` +
  `AND seq < stream_seq.horizon('${t}') ORDER BY seq LIMIT 2`;

function out(...words) {
  console.log(words.map((w) => (w === null || w === undefined ? 'None' : String(w))).join(' '));
}

// seq and payload of a row, read with node-postgres
async function row(client, t, id) {
  const r = await client.query(`SELECT seq, payload FROM ${t} WHERE id = $1`, [id]);
  return [r.rows[0].seq, r.rows[0].payload];
}

// pages of 2 numbers below the horizon; "query(sql, params)" returns the seqs
async function page(query, t) {
  let cursor = 0n;
  const pages = [];
  for (let i = 0; i < 8; i++) {
    const seqs = await query(PAGE(t), [cursor]);
    if (seqs.length) {
      pages.push(seqs.join(','));
      cursor = seqs[seqs.length - 1];
    }
  }
  return [pages.join('|'), typeof cursor];
}

async function withPg() {
  const t = 'ev_pg';
  const c = new pg.Client(url);
  await c.connect();
  for (const s of DDL(t)) await c.query(s);

  // types: bigint arrives as a string ('9' > '10'), seq inside jsonb as a number
  await c.query('BEGIN');
  const ins = await c.query(`INSERT INTO ${t} (id, customer_id, payload) VALUES (1, 1, 'a') RETURNING seq`);
  await c.query('COMMIT');
  const j = await c.query(`SELECT seq, to_jsonb(e) AS r FROM ${t} e WHERE id = 1`);
  const types = [typeof j.rows[0].seq, typeof j.rows[0].r.seq];
  // the recipe: parse int8 as BigInt (every pg client of the process, Knex's
  // and TypeORM's included)
  pg.types.setTypeParser(20, BigInt);
  out('pg', 'insert', ins.rows[0].seq, (await row(c, t, 1))[0]);

  // bulk insert: one INSERT of many rows
  await c.query(`INSERT INTO ${t} (id, customer_id, payload)
                 SELECT i, i, 'a' FROM unnest($1::bigint[]) AS i`, [[2, 3, 4]]);
  out('pg', 'bulk', (await row(c, t, 2))[0], (await row(c, t, 3))[0], (await row(c, t, 4))[0]);

  // save of a loaded row: every column written back as read
  await c.query('BEGIN');
  const r = (await c.query(`SELECT * FROM ${t} WHERE id = 1`)).rows[0];
  await c.query(`UPDATE ${t} SET customer_id = $1, payload = $2, seq = $3 WHERE id = $4`,
    [r.customer_id, 'b', r.seq, r.id]);
  await c.query('COMMIT');
  out('pg', 'save', ...(await row(c, t, 1)));

  const upsert = `INSERT INTO ${t} (id, customer_id, payload) VALUES ($1, $2, $3)
                  ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload`;
  await c.query(upsert, [2, 2, 'u']);
  await c.query(upsert, [5, 5, 'n']);
  out('pg', 'upsert', ...(await row(c, t, 2)), ...(await row(c, t, 5)));
  try {
    const seq = (await row(c, t, 3))[0];
    await c.query(`INSERT INTO ${t} (id, customer_id, payload, seq) VALUES ($1, $2, $3, $4)
                   ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload`, [3, 3, 'p', seq]);
    out('pg', 'upsert-plain', ...(await row(c, t, 3)));
  } catch (e) {
    out('pg', 'upsert-plain', e.code);
  }
  out('pg', 'page', ...(await page(async (sql, p) => (await c.query(sql, p)).rows.map((x) => x.seq), t)));
  out('pg', 'types', ...types);
  await c.end();

  // named queries (server-side prepared statements) through pgbouncer in
  // transaction mode: the next client on the same server connection finds
  // the name taken
  const codes = [];
  for (let i = 0; i < 2; i++) {
    const n = new pg.Client(url);
    await n.connect();
    try {
      await n.query({ name: 'horizon', text: 'SELECT stream_seq.horizon($1)', values: [t] });
      codes.push('ok');
    } catch (e) {
      codes.push(e.code);
    }
    await n.end();
  }
  out('pg', 'named', ...codes);
}

async function withKnex() {
  const t = 'ev_knex';
  const knex = require('knex')({ client: 'pg', connection: url, pool: { min: 0, max: 2 } });
  for (const s of DDL(t)) await knex.raw(s);
  const get = async (id) => {
    const r = await knex(t).where({ id }).first('seq', 'payload');
    return [r.seq, r.payload];
  };

  const before = await knex.transaction(async (trx) =>
    (await trx(t).insert({ id: 1, customer_id: 1, payload: 'a' }).returning('seq'))[0].seq);
  out('knex', 'insert', before, (await get(1))[0]);

  await knex(t).insert([2, 3, 4].map((i) => ({ id: i, customer_id: i, payload: 'a' })));
  out('knex', 'bulk', (await get(2))[0], (await get(3))[0], (await get(4))[0]);

  // the recipe: leave the stream column out of what is written
  let loaded = await knex(t).where({ id: 1 }).first();
  const { seq, ...writable } = { ...loaded, payload: 'b' };
  await knex(t).where({ id: 1 }).update(writable);
  out('knex', 'save', ...(await get(1)));
  // update(loadedRow) as it was read writes the number back unchanged
  loaded = await knex(t).where({ id: 1 }).first();
  await knex(t).where({ id: 1 }).update({ ...loaded, payload: 'c' });
  out('knex', 'save-plain', ...(await get(1)));

  await knex(t).insert([{ id: 2, customer_id: 2, payload: 'u' }, { id: 5, customer_id: 5, payload: 'n' }])
    .onConflict('id').merge();
  out('knex', 'upsert', ...(await get(2)), ...(await get(5)));
  try {
    const r3 = await knex(t).where({ id: 3 }).first();
    await knex(t).insert({ ...r3, payload: 'p' }).onConflict('id').merge(['payload']);
    out('knex', 'upsert-plain', ...(await get(3)));
  } catch (e) {
    out('knex', 'upsert-plain', e.code);
  }
  out('knex', 'page', ...(await page(async (sql, p) =>
    (await knex(t).where('seq', '>', p[0]).andWhere('seq', '<', knex.raw('stream_seq.horizon(?)', [t]))
      .orderBy('seq').limit(2).select('seq')).map((x) => x.seq), t)));
  await knex.destroy();
}

async function withSequelize() {
  const t = 'ev_sequelize';
  const { Sequelize, DataTypes } = require('sequelize');
  const sequelize = new Sequelize(url, { logging: false, pool: { max: 2 } });
  const attrs = {
    id: { type: DataTypes.BIGINT, primaryKey: true },
    customer_id: { type: DataTypes.INTEGER, allowNull: false },
    payload: { type: DataTypes.TEXT },
    seq: { type: DataTypes.BIGINT },           // written by stream_seq only
  };
  const Event = sequelize.define('Event', attrs, { tableName: t, timestamps: false });
  // the recipe: every write names the columns it may write
  const fields = ['id', 'customer_id', 'payload'];
  for (const s of DDL(t)) await sequelize.query(s);
  const get = async (id) => {
    const r = await Event.findByPk(id);
    return [r.seq, r.payload];
  };

  let before;
  await sequelize.transaction(async (transaction) => {
    const e = await Event.create({ id: 1, customer_id: 1, payload: 'a' }, { fields, transaction });
    await e.reload({ transaction });
    before = e.seq;
  });
  out('sequelize', 'insert', before, (await get(1))[0]);

  await Event.bulkCreate([2, 3, 4].map((i) => ({ id: i, customer_id: i, payload: 'a' })), { fields });
  out('sequelize', 'bulk', (await get(2))[0], (await get(3))[0], (await get(4))[0]);

  // save() of a loaded instance writes the attributes that changed
  let e = await Event.findByPk(1);
  e.payload = 'b';
  await e.save({ fields });
  out('sequelize', 'save', ...(await get(1)));
  e = await Event.findByPk(1);
  e.payload = 'c';
  await e.save();
  out('sequelize', 'save-plain', ...(await get(1)));

  await Event.bulkCreate([{ id: 2, customer_id: 2, payload: 'u' }, { id: 5, customer_id: 5, payload: 'n' }],
    { fields, updateOnDuplicate: ['payload'] });
  out('sequelize', 'upsert', ...(await get(2)), ...(await get(5)));
  try {
    const loaded = (await Event.findByPk(3)).get({ plain: true });
    await Event.upsert({ ...loaded, payload: 'p' });
    out('sequelize', 'upsert-plain', ...(await get(3)));
  } catch (err) {
    out('sequelize', 'upsert-plain', err.parent ? err.parent.code : err.message);
  }
  const { Op } = require('sequelize');
  out('sequelize', 'page', ...(await page(async (sql, p) =>
    (await Event.findAll({
      where: { seq: { [Op.gt]: p[0], [Op.lt]: sequelize.fn('stream_seq.horizon', t) } },
      order: [['seq', 'ASC']], limit: 2, attributes: ['seq'],
    })).map((x) => x.seq), t)));
  await sequelize.close();
}

async function withTypeorm() {
  const t = 'ev_typeorm';
  require('reflect-metadata');
  const typeorm = require('typeorm');
  const columns = (readOnly) => ({
    id: { type: 'bigint', primary: true },
    customer_id: { type: 'int' },
    payload: { type: 'text', nullable: true },
    // the recipe: insert: false, update: false
    seq: readOnly ? { type: 'bigint', nullable: true, insert: false, update: false }
      : { type: 'bigint', nullable: true },
  });
  const Event = new typeorm.EntitySchema({ name: 'Event', tableName: t, columns: columns(true) });
  const Plain = new typeorm.EntitySchema({ name: 'PlainEvent', tableName: t, columns: columns(false) });
  const ds = new typeorm.DataSource({ type: 'postgres', url, entities: [Event, Plain], poolSize: 2 });
  await ds.initialize();
  for (const s of DDL(t)) await ds.query(s);
  const repo = ds.getRepository(Event);
  const plain = ds.getRepository(Plain);
  const get = async (id) => {
    const r = await repo.findOneBy({ id });
    return [r.seq, r.payload];
  };

  let before;
  await ds.transaction(async (m) => {
    const e = await m.getRepository(Event).save({ id: 1, customer_id: 1, payload: 'a' });
    before = (await m.getRepository(Event).findOneBy({ id: 1 })).seq;
  });
  out('typeorm', 'insert', before, (await get(1))[0]);

  await repo.insert([2, 3, 4].map((i) => ({ id: i, customer_id: i, payload: 'a' })));
  out('typeorm', 'bulk', (await get(2))[0], (await get(3))[0], (await get(4))[0]);

  let e = await repo.findOneBy({ id: 1 });
  e.payload = 'b';
  await repo.save(e);
  out('typeorm', 'save', ...(await get(1)));
  e = await plain.findOneBy({ id: 1 });
  e.payload = 'c';
  await plain.save(e);
  out('typeorm', 'save-plain', ...(await get(1)));
  // preload() of an object built by hand (the row loaded, the object's
  // values over it), then save()
  await repo.save(await repo.preload({ id: 1n, customer_id: 1, payload: 'm', seq: null }));
  out('typeorm', 'merge', ...(await get(1)));

  await repo.upsert([{ id: 2, customer_id: 2, payload: 'u' }, { id: 5, customer_id: 5, payload: 'n' }], ['id']);
  out('typeorm', 'upsert', ...(await get(2)), ...(await get(5)));
  try {
    const loaded = await plain.findOneBy({ id: 3 });
    await plain.upsert({ ...loaded, payload: 'p' }, ['id']);
    out('typeorm', 'upsert-plain', ...(await get(3)));
  } catch (err) {
    out('typeorm', 'upsert-plain', err.code);
  }
  out('typeorm', 'page', ...(await page(async (sql, p) =>
    (await repo.createQueryBuilder('e').select('e.seq', 'seq')
      .where('e.seq > :c AND e.seq < stream_seq.horizon(:t)', { c: p[0], t })
      .orderBy('e.seq').limit(2).getRawMany()).map((x) => x.seq), t)));
  await ds.destroy();
}

(async () => {
  await withPg();
  await withKnex();
  await withSequelize();
  await withTypeorm();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
