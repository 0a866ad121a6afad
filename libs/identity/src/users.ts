/**
 * User administration (/api/user/ CRUD) and the role rules: an admin cannot create or alter a user
 * whose role is >= its own, nor grant such a role; root can do anything except delete a root user
 * or itself, or demote or disable the last enabled root (409 last_root). Every write emits 'user.changed' after it commits.
 */
import { IdInput } from '@gw/core/id-input';
import { Type, type Static } from '@sinclair/typebox';
import { GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import { ROLE, USER_STATUS, emailTaken, isUniqueViolation, usernameTaken, type LedgerStore, type NewUserRow, type SessionsStore, type UserRow, type UsersStore } from '@gw/db';
import { CurrentPasswordGuard } from './current-password';
import { PASSWORD_MAX, PASSWORD_MIN, hashPassword } from './passwords';
import { toUserView, type UserView } from './views';
import { LimitInput, limitPatch } from './limit-fields';

const Username = Type.String({ minLength: 3, maxLength: 64, pattern: '^[A-Za-z0-9_.-]+$', error: 'must be 3-64 characters of letters, digits, _ . -' });
const Password = Type.String({ minLength: PASSWORD_MIN, maxLength: PASSWORD_MAX, error: `must be ${PASSWORD_MIN}-${PASSWORD_MAX} characters` });
const DisplayName = Type.String({ maxLength: 64 });
const Email = Type.Union([Type.String({ maxLength: 254 }), Type.Null()], { description: 'E-mail address; "" or null clears it' });
const Role = Type.Union([Type.Literal(1), Type.Literal(10), Type.Literal(100)], { description: '1 user, 10 admin, 100 root', error: 'must be 1 (user), 10 (admin) or 100 (root)' });
const Group = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', error: 'must be 1-64 letters, digits, _ or -' });

/** Body of POST /api/user/ (Create User). */
export const UserCreate = Type.Object({
  username: Username,
  password: Password,
  display_name: Type.Optional(DisplayName),
  role: Type.Optional(Role),
  group: Type.Optional(Group),
  quota: Type.Optional(Type.Integer({ minimum: 0, maximum: 1e15, description: 'Initial balance in quota units, credited through the ledger' })),
  email: Type.Optional(Email),
  ...LimitInput,
});
export type UserCreate = Static<typeof UserCreate>;

/** Body of PUT /api/user/: `id` plus any subset of fields. */
export const UserUpdate = Type.Object({
  id: IdInput(),
  username: Type.Optional(Username),
  display_name: Type.Optional(DisplayName),
  email: Type.Optional(Email),
  password: Type.Optional(Password),
  role: Type.Optional(Role),
  group: Type.Optional(Group),
  status: Type.Optional(Type.Union([Type.Literal(1), Type.Literal(2)], { description: '1 enabled, 2 disabled', error: 'must be 1 (enabled) or 2 (disabled)' })),
  ...LimitInput,
  // Declared so it is not silently stripped: a balance only changes through the ledger.
  quota: Type.Optional(Type.Unknown({ description: 'Not accepted: use POST /api/ledger/adjust' })),
});
export type UserUpdate = Static<typeof UserUpdate>;

/** Body of PUT /api/user/self. */
export const UserSelfUpdate = Type.Object({
  username: Type.Optional(Username),
  display_name: Type.Optional(DisplayName),
  email: Type.Optional(Email),
  current_password: Type.Optional(Type.String({ maxLength: PASSWORD_MAX, description: 'Required to change the e-mail (it receives password resets) or the username' })),
});
export type UserSelfUpdate = Static<typeof UserSelfUpdate>;

export interface UserListQuery { keyword?: string; role?: number; status?: number; group?: string; offset: number; limit: number }

/** The acting user: only what the rules look at. */
export type Actor = Pick<UserRow, 'id' | 'role'>;

/** True when `actor` may alter `target` (admins: lower roles only; root: anyone). */
export const canManage = (actor: Actor, target: Pick<UserRow, 'id' | 'role'>) => actor.role >= ROLE.root || target.role < actor.role;

/**
 * Whose key ids a listing hides from `actor`: an admin below root does not see those of users at or above its role
 * (root, other admins), whose keys answer it 404 like unknown ones everywhere else; its own and lower users' it
 * sees, and root sees all. `roleOf` answers from memory (the user directory); an unknown user hides nothing.
 */
export const keysHiddenFrom = (actor: Actor, roleOf: (userId: number) => number | undefined) => (userId: number): boolean => {
  if (userId === actor.id) return false;
  const role = roleOf(userId);
  return role !== undefined && !canManage(actor, { id: userId, role });
};

/** PUT /api/user/self's answer to a current password that is wrong (or was replaced before the write). */
const wrongPassword = () => new GatewayError(403, 'invalid_password', 'Current password is wrong', { param: 'current_password' });
const forbidden = (code: string, message: string, param = '') => new GatewayError(403, code, message, { param });
const roleTooHigh = () => forbidden('role_too_high', 'You cannot change a user whose role is equal to or above your own');
const notFound = (id: number) => new GatewayError(404, 'user_not_found', `No user ${id}`, { param: 'id' });
const EMAIL_RE = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** An e-mail as stored ("" → null); a malformed one is refused. Says nothing about other users. */
function emailOf(raw: string | null | undefined): string | null {
  const email = raw?.trim() || null;
  if (email !== null && !EMAIL_RE.test(email)) throw new GatewayError(400, 'invalid_format', 'email is not a valid e-mail address', { param: 'email' });
  return email;
}

export class UserService {
  constructor(private readonly users: UsersStore, private readonly sessions: SessionsStore,
    private readonly ledger: LedgerStore, private readonly bus: ChangeBus,
    /** Checks of the current password (e-mail change), limited together with the password change's. */
    private readonly currentPassword: CurrentPasswordGuard = new CurrentPasswordGuard(),
    /** Ends every session and access token of a user (an admin setting their password; default: sessions only). */
    private readonly endCredentials: (userId: number) => Promise<unknown> = (id) => sessions.deleteUserSessions(id),
    /** Voids the user's pending password-reset links (its e-mail address changed). */
    private readonly voidResetTokens: (userId: number) => Promise<unknown> = async () => undefined) {}

  async create(actor: Actor, input: UserCreate): Promise<UserView> {
    const role = input.role ?? ROLE.user;
    if (actor.role < ROLE.root && role >= actor.role) throw forbidden('role_too_high', 'You cannot create a user with a role equal to or above your own', 'role');
    // Early, to skip the slow hash; the insert checks again inside its transaction (a racing create loses there).
    if (await this.users.byUsernameFolded(input.username)) throw new GatewayError(409, 'username_taken', `Username "${input.username}" is taken`, { param: 'username' });
    const email = await this.checkEmail(input.email, null);
    const passwordHash = await hashPassword(input.password);
    const now = nowSeconds();
    // The initial balance is a ledger entry like any other, so balance == sum(ledger) from the start.
    const row = await this.ledger.createUserWithOpeningBalance({
      username: input.username, passwordHash, displayName: input.display_name?.trim() ?? '', email, role,
      status: USER_STATUS.enabled, group: input.group ?? 'default', quota: 0, createdAt: now, updatedAt: now, ...limitPatch(input),
    }, input.quota ? { amount: input.quota, note: 'initial quota', actorId: actor.id } : null).catch(emailRace);
    await this.bus.committed('user.changed', { userId: row.id });
    return toUserView(row);
  }

  async list(q: UserListQuery): Promise<{ items: UserView[]; total: number }> {
    const r = await this.users.list(q);
    return { items: r.items.map(toUserView), total: r.total };
  }

  async get(id: number): Promise<UserView> {
    return toUserView(await this.mustGet(id));
  }

  async update(actor: Actor, input: UserUpdate): Promise<UserView> {
    return (await this.change(actor, input)).view;
  }

  /** `update`, also answering the row as it was: whom to tell of a change is decided by the old address. */
  async change(actor: Actor, input: UserUpdate): Promise<{ before: UserRow; view: UserView }> {
    if (input.quota !== undefined) {
      throw new GatewayError(400, 'quota_not_editable', 'quota cannot be changed here: balances change only through the ledger (POST /api/ledger/adjust)', { param: 'quota' });
    }
    const target = await this.mustGet(input.id);
    this.assertManage(actor, target);
    if (target.id === actor.id) assertNoCredentialChange(input, target);
    const patch: Partial<NewUserRow> = {};
    if (input.username !== undefined && input.username !== target.username) {
      if (await this.users.byUsernameFolded(input.username, target.id)) throw usernameTaken(input.username);
      patch.username = input.username;
    }
    if (input.display_name !== undefined) patch.displayName = input.display_name.trim();
    if (input.email !== undefined) patch.email = await this.checkEmail(input.email, target.id);
    if (input.group !== undefined) patch.group = input.group;
    Object.assign(patch, limitPatch(input));
    if (input.role !== undefined && input.role !== target.role) {
      if (actor.role < ROLE.root && input.role >= actor.role) throw forbidden('role_too_high', 'You cannot grant a role equal to or above your own', 'role');
      patch.role = input.role;
    }
    if (input.status !== undefined && input.status !== target.status) {
      if (input.status === USER_STATUS.disabled && target.id === actor.id) throw forbidden('cannot_disable_self', 'You cannot disable yourself', 'status');
      patch.status = input.status;
    }
    // A new password ends every session and access token (an intruder's too); disabling ends the sessions (tokens
    // are refused while the user is disabled, and work again once re-enabled).
    const end = input.password !== undefined ? 'credentials' : patch.status === USER_STATUS.disabled ? 'sessions' : null;
    if (input.password !== undefined) patch.passwordHash = await hashPassword(input.password);
    const view = await this.write(target.id, patch, end, undefined, actor.id);
    if (patch.email !== undefined && patch.email !== target.email) await this.voidResetTokens(target.id);
    return { before: target, view };
  }

  /** The caller's own profile fields; role, group, status and quota are not self-service. */
  /**
   * The e-mail address receives password-reset links, so changing it needs the current password:
   * otherwise a stolen session could redirect resets and take the account over.
   */
  async updateSelf(self: Pick<UserRow, 'id' | 'username' | 'email' | 'passwordHash' | 'role'>, input: UserSelfUpdate): Promise<UserView> {
    const patch: Partial<NewUserRow> = {};
    /** The password hash `current_password` was checked against: the write lands only while it is still the user's. */
    let checkedHash: string | undefined;
    const checkPassword = async (what: string) => {
      if (checkedHash !== undefined) return;
      if (!input.current_password) {
        throw new GatewayError(400, 'missing_field', `current_password is required to change the ${what}`, { param: 'current_password' });
      }
      if (!(await this.currentPassword.verify(self.id, input.current_password, self.passwordHash))) throw wrongPassword();
      checkedHash = self.passwordHash;
    };
    if (input.display_name !== undefined) patch.displayName = input.display_name.trim();
    if (input.username !== undefined && input.username !== self.username) {
      // Below root the name is an admin's to set (PUT /api/user/ refuses one's own row there too).
      if (self.role < ROLE.root) throw forbidden('username_not_editable', 'Your username is changed by an admin', 'username');
      await checkPassword('username');
      // Taken or not is answered only after the password check, like the e-mail below; the write re-checks.
      if (await this.users.byUsernameFolded(input.username, self.id)) throw usernameTaken(input.username);
      patch.username = input.username;
    }
    if (input.email !== undefined) {
      const email = emailOf(input.email);
      if (email !== self.email) await checkPassword('e-mail address');
      // Whether an address is taken is asked only after the password check: before it, any session could
      // probe which addresses are registered (409 against 400), without limit, which the reset request hides.
      patch.email = await this.checkEmail(email, self.id);
    }
    // A password change that ended this session while its password was checked must not be outlived by the new
    // address: the intruder it evicts would get the password-reset links.
    const view = await this.write(self.id, patch, null, checkedHash);
    // A reset link already mailed to the old address must not outlive the move: whoever reads that mailbox
    // (often why it is being left) could otherwise still take the account within the link's lifetime.
    if (patch.email !== undefined && patch.email !== self.email) await this.voidResetTokens(self.id);
    return view;
  }

  async setStatus(actor: Actor, id: number, status: 1 | 2): Promise<UserView> {
    const target = await this.mustGet(id);
    this.assertManage(actor, target);
    if (status === USER_STATUS.disabled && target.id === actor.id) throw forbidden('cannot_disable_self', 'You cannot disable yourself');
    return this.write(id, { status }, status === USER_STATUS.disabled ? 'sessions' : null, undefined, actor.id);
  }

  async delete(actor: Actor, id: number): Promise<void> {
    const target = await this.mustGet(id);
    if (target.role >= ROLE.root) throw forbidden('cannot_delete_root', 'A root user cannot be deleted');
    if (target.id === actor.id) throw forbidden('cannot_delete_self', 'You cannot delete yourself');
    this.assertManage(actor, target);
    // Sessions, access tokens, API keys and 2FA rows go with the user (ON DELETE CASCADE); the ledger stays as history.
    // Nothing deleted: promoted (or the actor demoted) meanwhile (403), or deleted meanwhile by another request (done, as before).
    if (!(await this.users.delete(id, actor.id)) && (await this.users.byId(id))) throw roleTooHigh();
    await this.bus.committed('user.changed', { userId: id });
  }

  /**
   * `ifPasswordHash`: only while the user's password hash is still this one (else 403 `invalid_password`, nothing written).
   * `actorId` (an admin's change): only while that user still manages this one, both roles as the write reads them
   * (else 403 `role_too_high`): the rule was checked on rows read at the request's start, and a slow step (a new
   * password's hash) lies between; a promotion of the target or a demotion of the actor may land in it.
   */
  private async write(id: number, patch: Partial<NewUserRow>, end: 'sessions' | 'credentials' | null, ifPasswordHash?: string, actorId?: number): Promise<UserView> {
    // A role or status change goes through the guarded write: at least one enabled root must stay, or nobody
    // could manage admins, roots or root-only settings again (only the offline reset-root-password would help).
    // A rename too: it re-checks, in the write, that no other user has the name in another case.
    // A new e-mail address too: it re-checks, in the write, that no other user has it in another case (checkEmail reads before).
    const guarded = patch.role !== undefined || patch.status !== undefined || patch.username !== undefined || !!patch.email;
    const row = await (guarded ? this.users.updateKeepingRoot(id, { ...patch, updatedAt: nowSeconds() }, ifPasswordHash, actorId) : this.users.update(id, { ...patch, updatedAt: nowSeconds() }, ifPasswordHash, actorId)).catch(emailRace);
    if (row === 'last_root') {
      throw new GatewayError(409, 'last_root', 'This would leave no enabled root user: make or enable another root first', { param: patch.role !== undefined ? 'role' : 'status' });
    }
    if (!row) throw ifPasswordHash === undefined ? await this.refusedWrite(id) : wrongPassword();
    if (end === 'credentials') await this.endCredentials(id);
    else if (end === 'sessions') {
      await this.sessions.deleteUserSessions(id);
      // Disabled as taken over: a reset link mailed before (to a mailbox the intruder may read) must not outlive it
      // and set the intruder's password once the account is enabled again.
      await this.voidResetTokens(id);
    }
    await this.bus.committed('user.changed', { userId: id });
    return toUserView(row);
  }

  /** Why a conditional write by an admin wrote nothing: the user is gone (404), or is no longer below the admin's role, either side having changed meanwhile (403). */
  private async refusedWrite(id: number): Promise<GatewayError> {
    return (await this.users.byId(id)) ? roleTooHigh() : notFound(id);
  }

  private async mustGet(id: number): Promise<UserRow> {
    const u = await this.users.byId(id);
    if (!u) throw notFound(id);
    return u;
  }

  private assertManage(actor: Actor, target: UserRow): void {
    if (!canManage(actor, target)) throw roleTooHigh();
  }

  /** Normalises an e-mail ("" → null) and refuses a malformed or taken one (a write racing this check: emailRace). */
  private async checkEmail(raw: string | null | undefined, selfId: number | null): Promise<string | null> {
    const email = emailOf(raw);
    if (email === null) return null;
    const other = await this.users.byEmail(email);
    if (other && other.id !== selfId) throw emailTaken();
    return email;
  }
}

/**
 * Root may change its own row here (admins cannot), but not what the self routes guard with the current password:
 * a stolen root session could otherwise set a password of its choosing, ending every session and token of the
 * owner, or move the address password resets go to.
 */
function assertNoCredentialChange(input: UserUpdate, self: UserRow): void {
  const param = input.password !== undefined ? 'password'
    : input.email !== undefined && emailOf(input.email) !== self.email ? 'email'
    // The username is what the owner logs in with: renamed by a thief, the right password no longer gets in.
    : input.username !== undefined && input.username !== self.username ? 'username' : null;
  if (param) {
    throw forbidden('use_self_route', 'Your own password, e-mail and username change only with your current password: POST /api/user/password, PUT /api/user/self', param);
  }
}


/**
 * checkEmail reads before the write: requests setting one exact address at once (on one node, or on several) all pass
 * it, and the unique index on the address refuses all but one. Those get the 409 the check gives, not a 500. (Case
 * variants of one address are not refused by an index: the repository re-checks, ignoring case, inside the write's
 * transaction, serialised by SQLite's single writer or PostgreSQL's username lock, and throws email_taken itself.)
 */
function emailRace(err: unknown): never {
  const taken = isUniqueViolation(err, 'users_email_uq', 'users', 'email');
  throw taken ? emailTaken() : err;
}
