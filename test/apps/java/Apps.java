// Apps.java HOST PORT USER: the recipes of doc/applications.md for plain
// JDBC (pgjdbc) and for Hibernate 3.6 (JPA annotations, its Session API),
// run by test/t/039_applications.pl through pgbouncer in transaction mode,
// in one JVM (stream tables ev_jdbc and ev_hibernate).  Prints one line per
// task ("stack task result"), which the test compares.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

import javax.persistence.Column;
import javax.persistence.Entity;
import javax.persistence.Id;
import javax.persistence.Table;

import org.hibernate.Session;
import org.hibernate.SessionFactory;
import org.hibernate.Transaction;
import org.hibernate.cfg.Configuration;
import org.hibernate.JDBCException;

public class Apps
{
	static final String UPSERT = "INSERT INTO %s (id, customer_id, payload) VALUES (?, ?, ?) "
		+ "ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload";
	static final String UPSERT_PLAIN = "INSERT INTO %s (id, customer_id, payload, seq) "
		+ "VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload";
	static final String PAGE = "SELECT seq FROM %s WHERE seq > ? "
		+ "AND seq < stream_seq.horizon('%s') ORDER BY seq LIMIT 2";

	/* The recipe: the stream column is read, never written by Hibernate. */
	@Entity
	@Table(name = "ev_hibernate")
	public static class Event
	{
		@Id
		Long id;
		@Column(name = "customer_id")
		Integer customerId;
		String payload;
		@Column(insertable = false, updatable = false)
		Long seq;

		public Event() {}
		Event(long id, int customerId, String payload)
		{
			this.id = id;
			this.customerId = customerId;
			this.payload = payload;
		}
	}

	/* A plain mapping of the same table, without the recipe. */
	@Entity
	@Table(name = "ev_hibernate")
	public static class PlainEvent
	{
		@Id
		Long id;
		@Column(name = "customer_id")
		Integer customerId;
		String payload;
		Long seq;

		public PlainEvent() {}
	}

	static void out(String... words)
	{
		System.out.println(String.join(" ", words));
	}

	static String str(Object o)
	{
		return o == null ? "None" : o.toString();
	}

	/* seq and payload of row "id" of "table", read in a transaction of its own */
	static String row(Connection c, String table, long id) throws SQLException
	{
		try (PreparedStatement ps = c.prepareStatement(
				"SELECT seq, payload FROM " + table + " WHERE id = ?"))
		{
			ps.setLong(1, id);
			try (ResultSet rs = ps.executeQuery())
			{
				rs.next();
				String r = str(rs.getObject(1)) + " " + rs.getString(2);
				c.commit();
				return r;
			}
		}
	}

	static String page(Connection c, String table) throws SQLException
	{
		List<String> pages = new ArrayList<>();
		long cursor = 0;
		for (int i = 0; i < 8; i++)
		{
			List<String> seqs = new ArrayList<>();
			try (PreparedStatement ps = c.prepareStatement(String.format(PAGE, table, table)))
			{
				ps.setLong(1, cursor);
				try (ResultSet rs = ps.executeQuery())
				{
					while (rs.next())
					{
						cursor = rs.getLong(1);
						seqs.add(Long.toString(cursor));
					}
				}
			}
			c.commit();
			if (!seqs.isEmpty())
				pages.add(String.join(",", seqs));
		}
		return String.join("|", pages) + " long";
	}

	static String upsertPlain(Connection c, String table) throws SQLException
	{
		String seq = row(c, table, 3).split(" ")[0];
		try (PreparedStatement ps = c.prepareStatement(String.format(UPSERT_PLAIN, table)))
		{
			ps.setLong(1, 3);
			ps.setInt(2, 3);
			ps.setString(3, "p");
			ps.setLong(4, Long.parseLong(seq));
			ps.executeUpdate();
			c.commit();
			return row(c, table, 3);
		}
		catch (SQLException e)
		{
			c.rollback();
			return e.getSQLState();
		}
	}

	static void upsert(Connection c, String table) throws SQLException
	{
		try (PreparedStatement ps = c.prepareStatement(String.format(UPSERT, table)))
		{
			for (Object[] r : new Object[][] {{2L, 2, "u"}, {5L, 5, "n"}})
			{
				ps.setLong(1, (Long) r[0]);
				ps.setInt(2, (Integer) r[1]);
				ps.setString(3, (String) r[2]);
				ps.executeUpdate();
			}
		}
		c.commit();
	}

	static void jdbc(String url) throws SQLException
	{
		String t = "ev_jdbc";
		try (Connection c = DriverManager.getConnection(url))
		{
			c.setAutoCommit(false);
			try (Statement s = c.createStatement())
			{
				s.execute("CREATE TABLE " + t + " (id bigint PRIMARY KEY, "
					+ "customer_id int NOT NULL, payload text)");
				s.execute("SELECT stream_seq.enable('" + t + "')");
			}
			c.commit();

			// insert: RETURNING seq is the placeholder 0 until the commit
			String before;
			String returned;
			try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + t
					+ " (id, customer_id, payload) VALUES (1, 1, 'a') RETURNING seq"))
			{
				ResultSet rs = ps.executeQuery();
				rs.next();
				long l = rs.getLong(1);
				before = "getLong=" + l + " wasNull=" + rs.wasNull()
					+ " getObject=" + str(rs.getObject(1));
				returned = str(rs.getObject(1));
			}
			c.commit();
			out("jdbc", "insert", returned, row(c, t, 1).split(" ")[0]);

			// bulk insert: a JDBC batch
			try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + t
					+ " (id, customer_id, payload) VALUES (?, ?, 'a')"))
			{
				for (long i = 2; i <= 4; i++)
				{
					ps.setLong(1, i);
					ps.setInt(2, (int) i);
					ps.addBatch();
				}
				ps.executeBatch();
			}
			c.commit();
			out("jdbc", "bulk", row(c, t, 2).split(" ")[0], row(c, t, 3).split(" ")[0],
				row(c, t, 4).split(" ")[0]);

			// save of a loaded row: every column written back as read
			try (PreparedStatement sel = c.prepareStatement(
					"SELECT customer_id, seq FROM " + t + " WHERE id = 1");
				 PreparedStatement upd = c.prepareStatement("UPDATE " + t
					+ " SET customer_id = ?, payload = ?, seq = ? WHERE id = 1"))
			{
				ResultSet rs = sel.executeQuery();
				rs.next();
				upd.setInt(1, rs.getInt(1));
				upd.setString(2, "b");
				upd.setObject(3, rs.getObject(2));
				upd.executeUpdate();
			}
			c.commit();
			out("jdbc", "save", row(c, t, 1));

			upsert(c, t);
			out("jdbc", "upsert", row(c, t, 2), row(c, t, 5));
			out("jdbc", "upsert-plain", upsertPlain(c, t));
			out("jdbc", "page", page(c, t));
			out("jdbc", "types", before);
		}
	}

	static void hibernate(String url, String user) throws SQLException
	{
		String t = "ev_hibernate";
		try (Connection c = DriverManager.getConnection(url))
		{
			c.setAutoCommit(false);
			try (Statement s = c.createStatement())
			{
				s.execute("CREATE TABLE " + t + " (id bigint PRIMARY KEY, "
					+ "customer_id int NOT NULL, payload text)");
				s.execute("SELECT stream_seq.enable('" + t + "')");
			}
			c.commit();

			Configuration cfg = new Configuration()
				.addAnnotatedClass(Event.class)
				.addAnnotatedClass(PlainEvent.class)
				.setProperty("hibernate.dialect", "org.hibernate.dialect.PostgreSQLDialect")
				.setProperty("hibernate.connection.driver_class", "org.postgresql.Driver")
				.setProperty("hibernate.connection.url", url)
				.setProperty("hibernate.connection.pool_size", "2")
				.setProperty("hibernate.jdbc.batch_size", "50");
			SessionFactory sf = cfg.buildSessionFactory();

			// insert: the number is the placeholder 0 until commit; refresh() after it
			Session s = sf.openSession();
			Transaction tx = s.beginTransaction();
			Event ev = new Event(1, 1, "a");
			s.save(ev);
			s.flush();
			s.refresh(ev);
			String before = str(ev.seq);
			tx.commit();
			tx = s.beginTransaction();
			s.refresh(ev);
			tx.commit();
			s.close();
			out("hibernate", "insert", before, str(ev.seq));

			// bulk insert: one flush, a JDBC batch
			s = sf.openSession();
			tx = s.beginTransaction();
			for (long i = 2; i <= 4; i++)
				s.save(new Event(i, (int) i, "a"));
			tx.commit();
			s.close();
			out("hibernate", "bulk", row(c, t, 2).split(" ")[0], row(c, t, 3).split(" ")[0],
				row(c, t, 4).split(" ")[0]);

			// save of a loaded row: the default flush updates every column
			s = sf.openSession();
			tx = s.beginTransaction();
			((Event) s.get(Event.class, 1L)).payload = "b";
			tx.commit();
			s.close();
			out("hibernate", "save", row(c, t, 1));
			s = sf.openSession();
			tx = s.beginTransaction();
			((PlainEvent) s.get(PlainEvent.class, 1L)).payload = "c";
			tx.commit();
			s.close();
			out("hibernate", "save-plain", row(c, t, 1));

			// merge() of a detached object built by hand (seq null)
			s = sf.openSession();
			tx = s.beginTransaction();
			s.merge(new Event(1, 1, "m"));
			tx.commit();
			s.close();
			out("hibernate", "merge", row(c, t, 1));
			s = sf.openSession();
			tx = s.beginTransaction();
			PlainEvent pe = new PlainEvent();
			pe.id = 1L;
			pe.customerId = 1;
			pe.payload = "x";
			String mergePlain;
			try
			{
				s.merge(pe);
				tx.commit();
				mergePlain = "accepted";
			}
			catch (JDBCException e)
			{
				tx.rollback();
				mergePlain = e.getSQLException().getSQLState();
			}
			s.close();

			// upsert: Hibernate 3.6 has none; a native statement
			s = sf.openSession();
			tx = s.beginTransaction();
			for (Object[] r : new Object[][] {{2L, 2, "u"}, {5L, 5, "n"}})
				s.createSQLQuery(String.format(UPSERT, t))
					.setParameter(0, r[0]).setParameter(1, r[1]).setParameter(2, r[2])
					.executeUpdate();
			tx.commit();
			s.close();
			out("hibernate", "upsert", row(c, t, 2), row(c, t, 5));
			out("hibernate", "upsert-plain", upsertPlain(c, t));

			// paging: a native query that returns entities
			s = sf.openSession();
			List<String> pages = new ArrayList<>();
			long cursor = 0;
			for (int i = 0; i < 8; i++)
			{
				tx = s.beginTransaction();
				@SuppressWarnings("unchecked")
				List<Event> evs = s.createSQLQuery("SELECT * FROM " + t
					+ " WHERE seq > ? AND seq < stream_seq.horizon('" + t + "')"
					+ " ORDER BY seq LIMIT 2")
					.addEntity(Event.class).setParameter(0, cursor).list();
				tx.commit();
				List<String> seqs = new ArrayList<>();
				for (Event e : evs)
				{
					cursor = e.seq;
					seqs.add(e.seq.toString());
				}
				if (!seqs.isEmpty())
					pages.add(String.join(",", seqs));
			}
			s.close();
			sf.close();
			out("hibernate", "page", String.join("|", pages), "long");
			// the same merge() with the plain mapping writes NULL over the number
			out("hibernate", "merge-plain", mergePlain);
		}
	}

	/*
	 * Without prepareThreshold=0: two connections run one statement each, in
	 * turns; the fifth run prepares it as S_1 on each, on the server
	 * connection pgbouncer hands both in turn.
	 */
	static String defaultPrepare(String url)
	{
		try (Connection x = DriverManager.getConnection(url);
			 Connection y = DriverManager.getConnection(url))
		{
			String sql = String.format(PAGE, "ev_jdbc", "ev_jdbc");
			PreparedStatement px = x.prepareStatement(sql);
			PreparedStatement py = y.prepareStatement(sql);
			for (int i = 0; i < 8; i++)
				for (PreparedStatement ps : new PreparedStatement[] {px, py})
				{
					ps.setLong(1, 0);
					ps.executeQuery().close();
				}
			return "ok";
		}
		catch (SQLException e)
		{
			return e.getSQLState();
		}
	}

	public static void main(String[] args) throws Exception
	{
		String plain = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/postgres?user="
			+ args[2];
		// pgbouncer in transaction mode: no server-side prepared statements
		String url = plain + "&prepareThreshold=0";
		jdbc(url);
		out("jdbc", "default-prepare", defaultPrepare(plain));
		hibernate(url, args[2]);
	}
}
