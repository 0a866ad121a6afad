import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import { ROLE } from '../schema';

/**
 * Guards of an admin's write on another user's row, judged on the acting user's role as the write's own statement
 * reads it, not as the request read it at its start: an actor demoted (or deleted) meanwhile must not still act with
 * the role it lost. Plain SQL over the table name, so one guard serves the SQLite and the PostgreSQL schema. An
 * actor that is gone reads as NULL: the comparison is not true, nothing is written.
 */
const actorRole = (actorId: number) => sql`(select "role" from "users" where "id" = ${actorId})`;

/** The row's role is below the actor's current one (an admin's 2FA reset: root's own peers are out of reach too). */
export function belowActor(role: SQLWrapper, actorId: number): SQL {
  return sql`${role} < ${actorRole(actorId)}`;
}

/** The actor currently manages the row's user: root, or a role above the row's (as the service's canManage). */
export function managedBy(role: SQLWrapper, actorId: number): SQL {
  return sql`(${actorRole(actorId)} >= ${ROLE.root} or ${belowActor(role, actorId)})`;
}

/** managedBy on rows read in the write's transaction (the actor's row as read there; undefined when it is gone). */
export const manages = (actor: { role: number } | undefined, target: { role: number }): boolean =>
  !!actor && (actor.role >= ROLE.root || target.role < actor.role);
