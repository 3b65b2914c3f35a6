#!/usr/bin/env node
// Drives KafkaJS for grete's compat tests.
//
//   node driver.js -bootstrap HOST:PORT <command> [-flag value ...]
//
// Every command prints JSON lines on stdout and exits 0 when it ran to the end; the Python tests
// judge the lines. KafkaJS's own log goes to stderr. Commands: produce, consume, group, admin,
// oversize, txn (see USAGE). KafkaJS has no static membership.
'use strict'

const { Kafka, CompressionTypes, CompressionCodecs, ConfigResourceTypes, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4 = require('lz4js')
const xxh32 = require('lz4js/xxh32')
const { ZstdCodec } = require('zstd-codec')

const USAGE = `usage: node driver.js -bootstrap HOST:PORT COMMAND [flags]
commands:
  produce  -topic T -count N [-codec none|gzip|snappy|lz4|zstd] [-keys K] [-headers] [-ts BASE_MS]
           [-idempotent] [-prefix v] [-lz4-linked]   (a refused send prints its error_code)
  consume  -topic T -count N [-group G] [-isolation committed|uncommitted] [-timeout-ms MS]
  group    -topic T -group G -partitions P -count N
  admin    -topic T -group G       (creates, describes and deletes T; G is a group that exists)
  oversize -topic T -size BYTES
  txn      -topic T -txid ID
  ctp      -in T -out T -group G -txid ID -count N`

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function die (message) {
  process.stderr.write(`kafkajs driver: ${message}\n`)
  process.exit(1)
}

// "-name value" pairs; a flag followed by another flag (or nothing) is true; "-name=false" is false.
function parseFlags (argv) {
  const flags = {}
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (!arg.startsWith('-')) die(`unexpected argument ${arg}\n${USAGE}`)
    const [name, inline] = arg.replace(/^-+/, '').split('=', 2)
    if (inline !== undefined) {
      flags[name] = inline === 'false' ? false : inline
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('-')) {
      flags[name] = argv[++i]
    } else {
      flags[name] = true
    }
  }
  return flags
}

// --- codecs: KafkaJS ships gzip; snappy from kafkajs-snappy; lz4 and zstd over pure-JS libraries ---

async function registerCodecs () {
  CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
  CompressionCodecs[CompressionTypes.LZ4] = () => ({
    async compress (encoder) { return lz4Frame(encoder.buffer) },
    async decompress (buffer) { return Buffer.from(lz4.decompress(buffer)) }
  })
  const zstd = await new Promise(resolve => ZstdCodec.run(resolve))
  const simple = new zstd.Simple()
  const streaming = new zstd.Streaming()
  CompressionCodecs[CompressionTypes.ZSTD] = () => ({
    async compress (encoder) { return Buffer.from(simple.compress(encoder.buffer, 3)) },
    // streaming: frames without a content size (librdkafka, Java) decode too
    async decompress (buffer) { return Buffer.from(streaming.decompress(buffer)) }
  })
}

// lz4js writes FLG 0x40: version 01 with the BLOCK_INDEPENDENCE bit clear, which Kafka's lz4 reader
// refuses ("Dependent block stream is unsupported", UNKNOWN_SERVER_ERROR on Produce). A frame of one
// block is independent whatever the bit says, so set the bit and fix the header checksum; with
// -lz4-linked the frame goes out as lz4js wrote it (the refusal test).
const LZ4_BLOCK_MAX = 4 * 1024 * 1024 // lz4js's block size (BD 0x70)
let lz4Linked = false
function lz4Frame (input) {
  const frame = Buffer.from(lz4.compress(input))
  if (lz4Linked) return frame
  if (input.length > LZ4_BLOCK_MAX) throw new Error('lz4: more than one block; cannot mark it independent')
  frame[4] |= 0x20
  frame[6] = (xxh32.hash(0, frame, 4, 2) >>> 8) & 0xff
  return frame
}

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

// --- client --------------------------------------------------------------------------------------

let kafka

function newKafka (bootstrap) {
  const toStderr = () => ({ namespace, level, label, log }) => {
    process.stderr.write(`${label} [${namespace}] ${log.message} ${JSON.stringify(log)}\n`)
  }
  return new Kafka({
    clientId: 'grete-compat-kafkajs',
    brokers: bootstrap.split(','),  // a cluster's addresses, comma-separated
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    retry: { initialRetryTime: 100, retries: 5 }
  })
}

function errorCode (err) {
  for (let e = err; e; e = e.cause || e.originalError) {
    if (typeof e.code === 'number') return e.code
    if (e.type && typeof e.type === 'string' && e.name === 'KafkaJSProtocolError') return e.code
  }
  return -1
}

function headersList (headers) {
  const out = []
  for (const [key, value] of Object.entries(headers || {})) {
    for (const v of Array.isArray(value) ? value : [value]) out.push([key, v === undefined || v === null ? null : v.toString()])
  }
  return out
}

function recordLine (partition, message) {
  return {
    partition,
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value.toString(),
    headers: headersList(message.headers),
    timestamp: Number(message.timestamp)
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// --- produce / consume ---------------------------------------------------------------------------

async function produce (f) {
  const count = Number(f.count || 10)
  const keys = Number(f.keys || 0)
  const ts = Number(f.ts || 0)
  const prefix = f.prefix || 'v'
  const idempotent = f.idempotent === true
  const producer = kafka.producer({ idempotent, maxInFlightRequests: idempotent ? 1 : undefined, allowAutoTopicCreation: false })
  await producer.connect()
  const messages = []
  for (let i = 0; i < count; i++) {
    const m = { value: `${prefix}${i}` }
    if (keys > 0) m.key = `k${i % keys}`
    if (f.headers) m.headers = { n: String(i), dup: ['a', 'b'] }
    if (ts > 0) m.timestamp = String(ts + i)
    messages.push(m)
  }
  try {
    const results = await producer.send({ topic: f.topic, messages, acks: -1, compression: CODECS[f.codec || 'none'] })
    for (const r of results) emit({ partition: r.partition, base_offset: Number(r.baseOffset), error_code: r.errorCode })
  } catch (err) {
    emit({ error_code: errorCode(err), error: String(err) })
  }
  await producer.disconnect()
}

// Reads up to count records; with -group commits each one (and leaves the group at the end),
// without it reads from the start in a throwaway group and commits nothing.
async function consume (f) {
  const count = Number(f.count || 10)
  const timeoutMs = Number(f['timeout-ms'] || 15000)
  const group = f.group || `kafkajs-reader-${process.pid}-${Date.now()}`
  const consumer = kafka.consumer({
    groupId: group,
    readUncommitted: f.isolation !== 'committed',
    maxWaitTimeInMs: 200,
    sessionTimeout: 6000,
    heartbeatInterval: 500
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [f.topic], fromBeginning: true })
  let got = 0
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  const timer = setTimeout(finish, timeoutMs)
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      if (got >= count) return
      got++
      emit(recordLine(partition, message))
      if (f.group) {
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
      }
      if (got >= count) finish()
    }
  })
  await finished
  clearTimeout(timer)
  await consumer.disconnect()
  emit({ consumed: got })
}

// --- groups --------------------------------------------------------------------------------------

const state = { phase: 0, consumed: 0 }

async function joinMember (name, topic, group) {
  const m = { name, assigned: [] }
  const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 200, sessionTimeout: 6000, heartbeatInterval: 500, rebalanceTimeout: 10000 })
  m.consumer = consumer
  consumer.on(consumer.events.GROUP_JOIN, e => { m.assigned = (e.payload.memberAssignment[topic] || []).slice() })
  consumer.on(consumer.events.REBALANCING, () => { m.assigned = [] })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      const line = recordLine(partition, message)
      line.member = name
      line.phase = state.phase
      emit(line)
      state.consumed++
      try {
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
      } catch (err) {
        emit({ member: name, commit_error: String(err) })
      }
    }
  })
  return m
}

async function waitBalanced (members, partitions, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const owned = members.flatMap(m => m.assigned)
    if (members.every(m => m.assigned.length > 0) && owned.length === partitions && new Set(owned).size === partitions) {
      return Object.fromEntries(members.map(m => [m.name, m.assigned.slice().sort((a, b) => a - b)]))
    }
    await sleep(50)
  }
  die(`group not balanced: ${JSON.stringify(members.map(m => [m.name, m.assigned]))}`)
}

async function produceTo (topic, partitions, values) {
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  await producer.send({ topic, acks: -1, messages: values.map((value, i) => ({ value, partition: i % partitions })) })
  await producer.disconnect()
}

async function waitConsumed (want, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (state.consumed >= want) {
      await sleep(300) // a duplicate would show up now
      return
    }
    await sleep(50)
  }
  die(`consumed ${state.consumed} of ${want} records`)
}

const values = (phase, n, topic) => Array.from({ length: n }, (_, i) => `p${phase}-${i}-${topic}`)

async function group (f) {
  const partitions = Number(f.partitions || 6)
  const count = Number(f.count || 24)
  const m0 = await joinMember('m0', f.topic, f.group)
  emit({ phase: 0, assignment: await waitBalanced([m0], partitions) })
  const members = [m0, await joinMember('m1', f.topic, f.group), await joinMember('m2', f.topic, f.group)]
  state.phase = 1
  emit({ phase: 1, assignment: await waitBalanced(members, partitions) })
  await produceTo(f.topic, partitions, values(1, count, f.topic))
  await waitConsumed(count)

  state.phase = 2
  await m0.consumer.disconnect() // leaves the group
  emit({ phase: 2, left: 'm0' })
  const rest = members.slice(1)
  emit({ phase: 2, assignment: await waitBalanced(rest, partitions) })
  await produceTo(f.topic, partitions, values(2, count, f.topic))
  await waitConsumed(2 * count)
  for (const m of rest) await m.consumer.disconnect()
}

// --- admin ---------------------------------------------------------------------------------------

async function admin (f) {
  const adm = kafka.admin()
  await adm.connect()
  const topic = f.topic
  const created = await adm.createTopics({
    waitForLeaders: true,
    topics: [{ topic, numPartitions: 3, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '3600000' }] }]
  })
  emit({ step: 'create', created })
  // KafkaJS answers false (no error) when the topic exists already.
  emit({ step: 'create-again', created: await adm.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] }) })

  const meta = await adm.fetchTopicMetadata({ topics: [topic] })
  emit({ step: 'describe', partitions: meta.topics[0].partitions.map(p => p.partitionId).sort((a, b) => a - b) })

  const described = await adm.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }]
  })
  const configs = {}
  for (const e of described.resources[0].configEntries) {
    configs[e.configName] = { value: e.configValue, source: e.configSource, default: e.isDefault }
  }
  emit({ step: 'describe-configs', configs })

  const { groups } = await adm.listGroups()
  const g = groups.find(x => x.groupId === f.group)
  emit({ step: 'list-groups', has_group: Boolean(g), protocol_type: g ? g.protocolType : null })

  await adm.deleteTopics({ topics: [topic] })
  emit({ step: 'delete', topic })
  try {
    await adm.deleteTopics({ topics: [topic] })
    emit({ step: 'delete-again', error_code: 0 })
  } catch (err) {
    emit({ step: 'delete-again', error_code: errorCode(err), error: String(err) })
  }
  await adm.disconnect()
}

// --- errors and transactions ---------------------------------------------------------------------

async function oversize (f) {
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  try {
    await producer.send({ topic: f.topic, acks: -1, messages: [{ value: 'x'.repeat(Number(f.size || 8000)) }] })
    emit({ step: 'big', error_code: -1 })
  } catch (err) {
    emit({ step: 'big', error_code: errorCode(err), error: String(err) })
  }
  const [r] = await producer.send({ topic: f.topic, acks: -1, messages: [{ value: 'small' }] })
  emit({ step: 'small', partition: r.partition, offset: Number(r.baseOffset) })
  await producer.disconnect()
}

async function txn (f) {
  const producer = kafka.producer({ transactionalId: f.txid, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 30000 })
  await producer.connect()
  for (const step of ['commit1', 'abort', 'commit2']) {
    const t = await producer.transaction()
    const messages = [0, 1, 2].map(i => ({ value: `${step}-${i}` }))
    const [r] = await t.send({ topic: f.topic, acks: -1, messages })
    if (step === 'abort') await t.abort()
    else await t.commit()
    const base = Number(r.baseOffset)
    emit({ step, offsets: [base, base + 1, base + 2] })
  }
  await producer.disconnect()
}

// Consume-transform-produce: read -count records of -in (partition 0) in group -group, then two
// transactions each producing the transformed half to -out with the input offsets sent to the
// transaction (sendOffsets): the first committed, the second aborted.
async function ctp (f) {
  const n = Number(f.count || 10)
  const half = n / 2
  const consumer = kafka.consumer({ groupId: f.group, maxWaitTimeInMs: 200, sessionTimeout: 6000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topics: [f.in], fromBeginning: true })
  const input = []
  let done
  const all = new Promise(resolve => { done = resolve })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      if (input.length < n) input.push(message)
      if (input.length === n) done()
    }
  })
  await all
  await consumer.disconnect()

  const producer = kafka.producer({ transactionalId: f.txid, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  for (const [step, part] of [['commit', input.slice(0, half)], ['abort', input.slice(half)]]) {
    const t = await producer.transaction()
    const [r] = await t.send({ topic: f.out, acks: -1, messages: part.map(m => ({ value: `out-${m.value}` })) })
    const next = String(Number(part[part.length - 1].offset) + 1)
    await t.sendOffsets({ consumerGroupId: f.group, topics: [{ topic: f.in, partitions: [{ partition: 0, offset: next }] }] })
    if (step === 'commit') await t.commit()
    else await t.abort()
    emit({ step, base_offset: Number(r.baseOffset), input_next: Number(next) })
  }
  await producer.disconnect()
}

// --- main ----------------------------------------------------------------------------------------

async function main () {
  const argv = process.argv.slice(2)
  let bootstrap = '127.0.0.1:9092'
  if (argv[0] === '-bootstrap') {
    bootstrap = argv[1]
    argv.splice(0, 2)
  }
  const command = argv.shift()
  const commands = { produce, consume, group, admin, oversize, txn, ctp }
  if (!commands[command]) die(USAGE)
  await registerCodecs()
  kafka = newKafka(bootstrap)
  const flags = parseFlags(argv)
  lz4Linked = flags['lz4-linked'] === true
  await commands[command](flags)
}

main().then(() => process.exit(0), err => die(err && err.stack ? err.stack : String(err)))
