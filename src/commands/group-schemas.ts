/** Validators of the group commands (issue 15): group.create, group.get, group.list, group.cancel. */
import { z } from 'zod';
import { GROUP_MODES, GROUP_ON_FAILURE } from '../../machines/index.js';
import { Limits } from './limits.js';
import { commandId, idToken, jobSpecSchema } from './schemas.js';

export const groupCreateSchema = z
  .object({
    id: commandId.optional(),
    name: z.string().min(1).max(200).optional(),
    mode: z.enum(GROUP_MODES),
    on_failure: z.enum(GROUP_ON_FAILURE).describe('stop (default): cancel the members not started; continue: go on; skip: mark them skipped').optional(),
    jobs: z.array(jobSpecSchema).min(1).max(Limits.MaxGroupJobs).describe('The members, in order: submit bodies of any queues, without key, depends_on or fan_out'),
  })
  .strict()
  .refine((g) => g.jobs.every((j) => j.key === undefined && j.depends_on === undefined && j.fan_out === undefined), { message: 'group members take no key, no depends_on and no fan_out', path: ['jobs'] });
export const groupGetSchema = z.object({ group_id: idToken }).strict();
export const groupListSchema = z.object({}).strict();
export const groupCancelSchema = z.object({ id: commandId.optional(), group_id: idToken, reason: z.string().max(Limits.MaxNoteChars).optional() }).strict();

export type GroupCreateCommand = z.infer<typeof groupCreateSchema>;
export type GroupGetCommand = z.infer<typeof groupGetSchema>;
export type GroupCancelCommand = z.infer<typeof groupCancelSchema>;
