// A bull-board (Express) server over BullMQ 6.7.6 queues, for echomq's interop tests.
//
// Usage: node board.mjs '<json>'   (or the JSON on stdin when argv[2] is missing or "-")
//   url      redis://host:port/db of the Redis holding the queues (required)
//   queues   queue names to show (required, at least one)
//   prefix   key prefix of those queues (default "bull")
//   host     address to listen on (default 127.0.0.1)
//   port     port to listen on (default 0: any free port)
//   validateResponses  let bull-board check every API answer against its schemas (default true)
//
// Once listening it prints one JSON line, {"event":"listening","host":…,"port":…,"versions":{…}},
// and then serves until SIGTERM/SIGINT, when it closes the queues and exits 0. A start-up
// failure prints {"event":"error","error":…} and exits 1.

import { readFileSync } from 'node:fs';
import process from 'node:process';

import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { Queue } from 'bullmq';
import express from 'express';

const NODE_MODULES = new URL('../../node_modules/', import.meta.url);

async function readConfig() {
  const inline = process.argv[2];
  if (inline !== undefined && inline !== '-') return JSON.parse(inline);
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return text.trim() ? JSON.parse(text) : {};
}

function redisOptions(url) {
  const parsed = new URL(url);
  if (parsed.protocol !== 'redis:') throw new Error(`only redis:// urls are supported, got ${url}`);
  const options = {
    host: parsed.hostname || '127.0.0.1',
    port: Number(parsed.port || 6379),
    maxRetriesPerRequest: null,
  };
  const db = Number(parsed.pathname.replace(/^\//, '') || 0);
  if (db) options.db = db;
  if (parsed.username) options.username = decodeURIComponent(parsed.username);
  if (parsed.password) options.password = decodeURIComponent(parsed.password);
  return options;
}

function versionOf(pkg) {
  // Some packages do not export ./package.json, so it is read from tests/node_modules directly.
  return JSON.parse(readFileSync(new URL(`${pkg}/package.json`, NODE_MODULES), 'utf8')).version;
}

function print(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

async function main() {
  const config = await readConfig();
  const names = config.queues;
  if (!config.url) throw new Error('"url" is required');
  if (!Array.isArray(names) || names.length === 0) throw new Error('"queues" must list queue names');

  const connection = redisOptions(config.url);
  const prefix = config.prefix ?? 'bull';
  const queues = names.map(name => new Queue(name, { connection, prefix }));
  for (const queue of queues) {
    // A Redis error must show in the test's stderr, not crash the board.
    queue.on('error', err => process.stderr.write(`queue ${queue.name}: ${err}\n`));
  }

  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath('/');
  createBullBoard({
    queues: queues.map(queue => new BullMQAdapter(queue)),
    serverAdapter,
    options: { validateResponses: config.validateResponses ?? true },
  });

  const app = express();
  app.use('/', serverAdapter.getRouter());

  const server = await new Promise((resolve, reject) => {
    const listener = app.listen(config.port ?? 0, config.host ?? '127.0.0.1', err =>
      err ? reject(err) : resolve(listener),
    );
  });
  const address = server.address();
  print({
    event: 'listening',
    host: address.address,
    port: address.port,
    versions: {
      '@bull-board/api': versionOf('@bull-board/api'),
      '@bull-board/express': versionOf('@bull-board/express'),
      bullmq: versionOf('bullmq'),
      express: versionOf('express'),
      node: process.version,
    },
  });

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    server.closeAllConnections?.();
    await new Promise(resolve => server.close(() => resolve()));
    await Promise.allSettled(queues.map(queue => queue.close()));
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch(err => {
  print({ event: 'error', error: String(err?.stack ?? err) });
  process.exit(1);
});
