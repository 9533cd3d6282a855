package overrides

import "context"

// Store keeps overrides where every process of the fleet can read them. It
// orders the changes of each override by revision (see [Change]), by its
// own clock, never its callers'.
type Store interface {
	// Set creates or replaces the override of o's identifier and returns
	// the row as the store then holds it: an existing override keeps its
	// id, a new one takes o.ID.
	Set(ctx context.Context, o Override) (Change, error)
	// Get returns the live override of an identifier or pattern, or
	// ErrNotFound.
	Get(ctx context.Context, workspace, namespace, identifier string) (Override, error)
	// List returns up to limit live overrides of a namespace whose
	// identifier sorts after the given one, in identifier order.
	List(ctx context.Context, workspace, namespace, after string, limit int) ([]Override, error)
	// Delete deletes the live override of an identifier or pattern and
	// returns the row as the store then holds it, or ErrNotFound.
	Delete(ctx context.Context, workspace, namespace, identifier string) (Change, error)
	// Revision returns the store's clock in revisions: a change that
	// commits after Revision returns gets a revision at least this large,
	// but for one already under way (which a poll's look-back covers).
	Revision(ctx context.Context) (int64, error)
	// Changes returns every override, deleted ones included (until they
	// are purged), whose revision is at least since.
	Changes(ctx context.Context, since int64) ([]Change, error)
	// Page returns up to limit live overrides after the position after (0
	// for the first page), in a stable order, and the position of the last
	// one: the start-up load reads every override this way.
	Page(ctx context.Context, after int64, limit int) (changes []Change, last int64, err error)
}
