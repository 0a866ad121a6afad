import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import { ROLE, USER_STATUS } from '../schema';

/**
 * Guards of an admin's write on another user's row, judged on the acting user's role as the write's own statement
 * reads it, not as the request read it at its start: an actor demoted (or deleted) meanwhile must not still act with
 * the role it lost. Plain SQL over the table name, so one guard serves the SQLite and the PostgreSQL schema. An
 * actor that is gone or disabled reads as NULL: the comparison is not true, nothing is written.
 */
const actorRole = (actorId: number) => sql`(select "role" from "users" where "id" = ${actorId} and "status" = ${USER_STATUS.enabled})`;

/** The row's role is below the actor's current one (an admin's 2FA reset: root's own peers are out of reach too). */
export function belowActor(role: SQLWrapper, actorId: number): SQL {
  return sql`${role} < ${actorRole(actorId)}`;
}

/** The actor currently manages the row's user: root, or a role above the row's (as the service's canManage). */
export function managedBy(role: SQLWrapper, actorId: number): SQL {
  return sql`(${actorRole(actorId)} >= ${ROLE.root} or ${belowActor(role, actorId)})`;
}

/**
 * managedBy on rows read in the write's transaction (the actor's row as read there; undefined when it is gone), and
 * a role granted by the write is one the actor may still grant: a root demoted while its request ran must not
 * make a new root or admin with the role it lost.
 */
export const manages = (actor: { role: number; status: number } | undefined, target: { role: number }, grant?: number): boolean =>
  !!actor && actor.status === USER_STATUS.enabled
  && (actor.role >= ROLE.root || (target.role < actor.role && (grant === undefined || grant < actor.role)));
