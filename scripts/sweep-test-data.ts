/**
 * After a test run (CI): drops the PostgreSQL schemas and Redis keys that test processes no longer
 * running left behind (each run makes its own; a killed run cannot clean up), so repeated runs do not
 * fill the test database. Never touches a live process's data. Prints one line.
 * GW_TEST_PG / GW_TEST_REDIS choose the servers, as for the tests.
 */
import { dropStaleSchemas } from '../tests/helpers/pg-schemas';
import { dropStalePrefixes } from '../tests/helpers/redis';

const schemas = await dropStaleSchemas();
const keys = await dropStalePrefixes();
console.log(`sweep-test-data: dropped ${schemas.length} test schema(s) and ${keys} test key(s) of finished runs`);
