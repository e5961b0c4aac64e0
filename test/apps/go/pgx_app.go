// pgx_app.go DSN TABLE: the pgx v4 recipes of doc/applications.md on
// stream table TABLE, run by test/t/039_applications.pl through pgbouncer
// in transaction mode (DSN: a libpq-style connection string).  Prints one
// line per task ("task result"), which the test compares.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

var ctx = context.Background()

func out(words ...interface{}) {
	s := make([]string, len(words))
	for i, w := range words {
		switch v := w.(type) {
		case *int64:
			if v == nil {
				s[i] = "None"
			} else {
				s[i] = fmt.Sprint(*v)
			}
		default:
			s[i] = fmt.Sprint(v)
		}
	}
	fmt.Println(strings.Join(s, " "))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return err.Error()
}

func main() {
	dsn, table := os.Args[1], os.Args[2]
	// pgbouncer in transaction mode: no named prepared statements
	conn, err := pgx.Connect(ctx, dsn+" statement_cache_mode=describe")
	check(err)
	row := func(id int) (*int64, string) {
		var seq *int64 // NULL does not scan into an int64
		var payload string
		check(conn.QueryRow(ctx, "SELECT seq, payload FROM "+table+" WHERE id = $1", id).
			Scan(&seq, &payload))
		return seq, payload
	}

	_, err = conn.Exec(ctx, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, "+
		"customer_id int NOT NULL, payload text)")
	check(err)
	_, err = conn.Exec(ctx, "SELECT stream_seq.enable($1)", table)
	check(err)

	// insert: RETURNING gives the placeholder 0, the number exists after commit
	tx, err := conn.Begin(ctx)
	check(err)
	var before *int64
	check(tx.QueryRow(ctx, "INSERT INTO "+table+" (id, customer_id, payload) "+
		"VALUES (1, 1, 'a') RETURNING seq").Scan(&before))
	check(tx.Commit(ctx))
	after, _ := row(1)
	out("insert", before, after)

	// bulk insert: COPY
	_, err = conn.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "customer_id", "payload"},
		pgx.CopyFromRows([][]interface{}{{2, 2, "a"}, {3, 3, "a"}, {4, 4, "a"}}))
	check(err)
	s2, _ := row(2)
	s3, _ := row(3)
	s4, _ := row(4)
	out("bulk", s2, s3, s4)

	// save of a loaded row: every column written back as read
	tx, err = conn.Begin(ctx)
	check(err)
	var cust int
	var seq *int64
	check(tx.QueryRow(ctx, "SELECT customer_id, seq FROM "+table+" WHERE id = 1").Scan(&cust, &seq))
	_, err = tx.Exec(ctx, "UPDATE "+table+" SET customer_id = $1, payload = $2, seq = $3 WHERE id = 1",
		cust, "b", seq)
	check(err)
	check(tx.Commit(ctx))
	seq, p := row(1)
	out("save", seq, p)

	upsert := "INSERT INTO " + table + " (id, customer_id, payload) VALUES ($1, $2, $3) " +
		"ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload"
	_, err = conn.Exec(ctx, upsert, 2, 2, "u")
	check(err)
	_, err = conn.Exec(ctx, upsert, 5, 5, "n")
	check(err)
	seq, p = row(2)
	seq5, p5 := row(5)
	out("upsert", seq, p, seq5, p5)

	seq, _ = row(3)
	_, err = conn.Exec(ctx, "INSERT INTO "+table+" (id, customer_id, payload, seq) "+
		"VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload",
		3, 3, "p", seq)
	if err != nil {
		out("upsert-plain", code(err))
	} else {
		seq, p = row(3)
		out("upsert-plain", seq, p)
	}

	// paging below the horizon, 2 rows a page
	page := "SELECT seq FROM " + table + " WHERE seq > $1 AND seq < stream_seq.horizon($2) " +
		"ORDER BY seq LIMIT 2"
	var cursor int64
	var pages []string
	for i := 0; i < 8; i++ {
		rows, err := conn.Query(ctx, page, cursor, table)
		check(err)
		var seqs []string
		for rows.Next() {
			check(rows.Scan(&cursor))
			seqs = append(seqs, fmt.Sprint(cursor))
		}
		check(rows.Err())
		if len(seqs) > 0 {
			pages = append(pages, strings.Join(seqs, ","))
		}
	}
	out("page", strings.Join(pages, "|"), fmt.Sprintf("%T", cursor))

	// without statement_cache_mode=describe: a statement prepared on one
	// server connection, run again while another client holds that one in
	// a transaction, reaches a server connection that does not have it
	a, err := pgx.Connect(ctx, dsn)
	check(err)
	b, err := pgx.Connect(ctx, dsn)
	check(err)
	_, err = a.Exec(ctx, page, 0, table)
	check(err)
	btx, err := b.Begin(ctx)
	check(err)
	_, err = btx.Exec(ctx, "SELECT 1")
	check(err)
	_, err = a.Exec(ctx, page, 0, table)
	if err != nil {
		out("default-cache", code(err))
	} else {
		out("default-cache", "ok")
	}
	check(btx.Commit(ctx))
	a.Close(ctx)
	b.Close(ctx)
	conn.Close(ctx)
}
