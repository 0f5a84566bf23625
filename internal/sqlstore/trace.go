package sqlstore

import (
	"database/sql"

	"github.com/XSAM/otelsql"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// openDB opens the database through driver, wrapped by otelsql when tp is
// set: a span per query, exec and transaction step, named after the
// database/sql method ("sql.conn.query", "sql.conn.exec", ...). The span
// holds the statement text, which is always parameterised here, and never
// its arguments (phone numbers, IPs): otelsql records arguments only
// through an AttributesGetter, and none is given.
func openDB(driver, dsn, system string, tp trace.TracerProvider) (*sql.DB, error) {
	if tp == nil {
		return sql.Open(driver, dsn)
	}
	return otelsql.Open(driver, dsn,
		otelsql.WithTracerProvider(tp),
		otelsql.WithAttributes(attribute.String("db.system.name", system)),
		otelsql.WithSpanOptions(otelsql.SpanOptions{
			// The steps of a call that say nothing a trace needs: a span
			// each for resetting a pooled connection and for reading rows
			// would outnumber the queries.
			OmitConnResetSession: true,
			OmitRows:             true,
			DisableErrSkip:       true,
		}))
}
