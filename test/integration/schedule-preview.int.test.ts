/**
 * docket.cmd.schedule.preview end to end: through a real nats-server to a node (its clock a
 * ManualClock, so "from now" is exact), by the SDK, by a raw request (bad input refused with
 * invalid_request naming the field, nothing appended), and by the CLI `docket schedule next`.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import type { JetStreamManager } from '@nats-io/jetstream';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import { DocketError } from '../../src/errors.js';
import type { DocketNode } from '../../src/node.js';
import { closeTestFile, connectTestClients, openResources, request, startTrackedNode, streamMessages } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { runDocket } from '../support/cli.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
// A Saturday evening in New York, hours before the spring-forward change of 2026-03-08.
const clock = new ManualClock(Date.parse('2026-03-07T23:00:00.000Z'));

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { clock, nodeName: 'preview-a' });
  ({ client, nc, jsm } = await connectTestClients(server, 'preview-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(() => {
  expect(openResources()).toHaveLength(1);
});

/** `node bin/docket.js <args>` against this file's server. */
const docket = (args: readonly string[]) => runDocket(server.url, args);

describe('schedule.preview', () => {
  test('the SDK: the next times from the node\'s now, in UTC; 02:30 New York on the spring-forward day fires at 03:00 EDT', async () => {
    const reply = await client.previewSchedule('30 2 * * *', { timezone: 'america/new_york', count: 3 });
    expect(reply).toEqual({ timezone: 'America/New_York', times: ['2026-03-08T07:00:00.000Z', '2026-03-09T06:30:00.000Z', '2026-03-10T06:30:00.000Z'] });
    clock.advance(24 * 3_600_000);
    expect((await client.previewSchedule('30 2 * * *', { timezone: 'America/New_York', count: 1 })).times).toEqual(['2026-03-09T06:30:00.000Z']);
  });

  test('from, count and the default of 5 in UTC; seconds accepted', async () => {
    const reply = await client.previewSchedule('*/15 * * * * *', { from: '2030-01-01T00:00:00Z' });
    expect(reply).toEqual({ timezone: 'UTC', times: ['2030-01-01T00:00:15.000Z', '2030-01-01T00:00:30.000Z', '2030-01-01T00:00:45.000Z', '2030-01-01T00:01:00.000Z', '2030-01-01T00:01:15.000Z'] });
  });

  test('bad input: invalid_request naming the field, with croner\'s reason for a cron; nothing appended', async () => {
    const before = await streamMessages(jsm);
    expect(await request(nc, 'schedule.preview', { cron: '61 * * * *' })).toEqual({ ok: false, error: { code: 'invalid_request', message: 'cron: invalid cron: Invalid value for minute: 61', details: { issues: [{ path: 'cron', message: 'invalid cron: Invalid value for minute: 61' }] } } });
    const zone = await request(nc, 'schedule.preview', { cron: '* * * * *', timezone: 'Mars/Olympus' });
    expect(zone).toMatchObject({ ok: false, error: { code: 'invalid_request', message: 'timezone: unknown time zone: give an IANA name such as UTC, Europe/Berlin or America/New_York' } });
    expect(await request(nc, 'schedule.preview', { cron: '* * * * *', count: 0 })).toMatchObject({ ok: false, error: { code: 'invalid_request', message: expect.stringMatching(/^count: /) } });
    expect(await request(nc, 'schedule.preview', { cron: '* * * * *', from: 'tomorrow' })).toMatchObject({ ok: false, error: { code: 'invalid_request', message: expect.stringMatching(/^from: /) } });
    await expect(client.previewSchedule('')).rejects.toBeInstanceOf(DocketError);
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('the CLI: docket schedule next prints the times in the zone and in UTC, or JSON; a bad cron exits 1 with the reason', async () => {
    const [table, json, bad] = await Promise.all([
      docket(['schedule', 'next', '0,30 * * * *', '--tz', 'Europe/Berlin', '--from', '2026-10-25T00:15:00Z', '--count', '3']),
      docket(['schedule', 'next', '0 9 * * MON-FRI', '--from', '2030-01-04T12:00:00Z', '--count', '2', '--json']),
      docket(['schedule', 'next', '0 0 31 2 *']),
    ]);
    expect(table.code, table.stderr).toBe(0);
    // 02:30 CEST, then 03:00 CET: the repeated 02:00-02:59 (CET) fires nothing.
    expect(table.stdout).toContain('2026-10-25 02:30:00 GMT+2');
    expect(table.stdout).toContain('2026-10-25T00:30:00.000Z');
    expect(table.stdout).toContain('2026-10-25 03:00:00 GMT+1');
    expect(table.stdout).toContain('2026-10-25T02:00:00.000Z');
    expect(table.stdout).toContain('time (Europe/Berlin)');
    expect(JSON.parse(json.stdout)).toEqual({ ok: true, timezone: 'UTC', times: ['2030-01-07T09:00:00.000Z', '2030-01-08T09:00:00.000Z'] });
    expect(bad.code).toBe(1);
    expect(bad.stderr.trim()).toBe('error invalid_request: cron: invalid cron: the cron names no time (e.g. a day no month has)');
  });
});
