"""``agentrl bench``'s table: ``render`` prints the result dict of ``bench.run`` as a rich table (figure,
ours, peer, ratio with its spread over the interleaved pairs, GFLOP/s and share of the GEMM peak)."""
from __future__ import annotations

def _f(x, unit=''):
    if x is None:
        return '-'
    if isinstance(x, bool):
        return 'yes' if x else 'NO'
    if isinstance(x, str):
        return x
    if abs(x) >= 100:
        return f'{x:,.0f}{unit}'
    if abs(x) >= 1:
        return f'{x:.2f}{unit}'
    return f'{x:.4f}{unit}'


def _ratio(x, r, unit='x'):
    """A headline ratio and its spread over the pairs: 'median (min-max)'."""
    if x is None:
        return '-'
    return _f(x, unit) + (f" ({r['min']:.2f}-{r['max']:.2f})" if r else '')


def _pct(x):
    return '-' if x is None else f'{100 * x:.1f}%'


def _frac(r):
    """A peak fraction and its spread over the pairs, in percent."""
    return '-' if not r else f"{_pct(r['median'])} ({100 * r['min']:.1f}-{100 * r['max']:.1f})"


def render(res: dict, console=None) -> None:
    """Print the result as a rich table: figure, ours, peer, ratio (median of the per-round pair ratios
    (min-max)), and GFLOP/s with the share of the GEMM peak measured in the same run."""
    from rich.table import Table

    from ...runtime.terminal import console as new_console
    console = console or new_console()
    fr, sf, hg, hs, st = res['rollout_fresh'], res['rollout_sft'], res['hf_generate'], res['hf_sft_step'], res['sft_step']
    s, m, rat, eff = res['settings'], res['machine'], res.get('ratios') or {}, res.get('efficiency')
    load, load_end = m.get('loadavg_1m_start'), m.get('loadavg_1m_end')
    t = Table(title=f"agentrl bench: {s['episodes']} episodes ({s['tasks']} tasks x {s['episodes_per_task']}); "
                    f"ratio = median (min-max) of {s['repeats']} interleaved pair ratios (ABBA, 1 warm-up) | "
                    f"torch {m['torch']}, {m['torch_threads']} threads, {m['cpu_count']} CPUs"
                    + (f', load {load:.1f}' if load is not None else '')
                    + (f' -> {load_end:.1f}' if load_end is not None else ''))
    for col, just in (('figure', 'left'), ('ours', 'right'), ('peer', 'right'), ('ratio (min-max)', 'right'),
                      ('GFLOP/s (% of GEMM peak)', 'right')):
        t.add_column(col, justify=just)
    peak = res.get('gemm_peak_gflops')

    def gf(label, g, frac=None):
        if g is None:
            return ''
        frac = frac if frac is not None else (g / peak if peak else None)
        return f'{label} {g:.1f}' + (f' ({_pct(frac)})' if frac is not None else '')

    sample = gf('sampling step', res.get('sampling_step_gflops'), res.get('sampling_step_peak_fraction')) if eff else ''
    sft_gf = gf('SFT step', res.get('sft_step_gflops'), res.get('sft_step_peak_fraction')) if eff else ''
    for label, r, suffix in (('oracle-SFT TinyAgent', sf, ''), ('fresh TinyAgent', fr, '_fresh')):
        t.add_section()
        t.add_row(f'[bold]rollout_batch, {label}[/bold]', '', '', '', '')
        t.add_row('  episodes/s', _f(r['episodes_per_s']), '', '', '')
        t.add_row('  tokens/s (all trajectory tokens)', _f(r['tokens_per_s']), '', '', '')
        t.add_row('  sampled policy tokens/s', _f(r['policy_tokens_per_s']), '', '', '')
        t.add_row('  tokens / policy tokens / turns per episode; pass rate',
                  f"{r['mean_tokens']:.1f} / {r['mean_policy_tokens']:.1f} / {r['mean_turns']:.1f}; "
                  f"{r['pass_rate']:.2f}", '', '', '')
        t.add_row(f"  rollout s | one forward {tuple(r['forward_shape'])} s [bold](rollout_vs_forward)[/bold]",
                  _f(r['seconds'], ' s'), _f(r['forward_seconds'], ' s'),
                  _ratio(r['rollout_vs_forward'], rat.get('rollout_vs_forward' + suffix)),
                  gf('forward', r.get('forward_gflops')))
        t.add_row('  cached s | no-cache s [bold](kv_cache_speedup)[/bold]', _f(r['seconds'], ' s'),
                  _f(r['no_cache_seconds'], ' s'), _ratio(r['kv_cache_speedup'], rat.get('kv_cache_speedup' + suffix)),
                  sample)
        t.add_row('  no-cache trajectories identical', _f(r['no_cache_identical']), '', '', '')
    t.add_section()
    if hg is not None:
        same, roll = res['ours_same_shape'], (res.get('hf_sampling') or {}).get('rollout', {})
        t.add_row(f"[bold]sampling vs HF GPT2.generate[/bold] (batch {hg['batch']}, prompt {hg['prompt_tokens']}, "
                  f"{hg['new_tokens']} new, attn={hg['attn']})", '', '', '', '')
        t.add_row('  sampled tokens/s: rollout_batch (env, replies) | generate [bold](sampling_vs_hf)[/bold]',
                  _f(roll.get('policy_tokens_per_s', sf['policy_tokens_per_s'])), _f(hg['generated_tokens_per_s']),
                  _ratio(res['sampling_vs_hf'], rat.get('sampling_vs_hf')), sample)
        t.add_row('  sampled tokens/s: our model on generate\'s workload | generate '
                  '[bold](sampling_vs_hf_same_shape)[/bold]',
                  _f(same['generated_tokens_per_s']), _f(hg['generated_tokens_per_s']),
                  _ratio(res['sampling_vs_hf_same_shape'], rat.get('sampling_vs_hf_same_shape')), sample)
        t.add_section()
        t.add_row(f"[bold]SFT step[/bold] (masked NLL + backward + AdamW, batch {tuple(st['shape'])}, "
                  f"GPT2 attn={hs['attn']})", '', '', '', '')
        t.add_row('  padded tokens/s [bold](sft_step_vs_hf)[/bold]', _f(st['tokens_per_s']), _f(hs['tokens_per_s']),
                  _ratio(res['sft_step_vs_hf'], rat.get('sft_step_vs_hf')), sft_gf)
    if res.get('hf_engine'):
        t.add_section()
        t.add_row('[bold]HFPolicy GPT-2: our lockstep engine | one batched generate per turn[/bold]', '', '', '', '')
        for key, label in (('sft', 'oracle SFT'), ('fresh', 'fresh')):
            r = res['hf_engine'][key]
            e, g = r['engine'], r['generate_loop']
            name = 'hf_engine_vs_generate_loop' + ('' if key == 'sft' else '_fresh')
            t.add_row(f"  {label}: episodes/s ({e['mean_turns']:.1f} turns, {e['mean_tokens']:.0f} tokens; pass "
                      f"{e['pass_rate']:.2f} | {g['pass_rate']:.2f}) [bold]({name})[/bold]",
                      _f(e['episodes_per_s']), _f(g['episodes_per_s']), _ratio(r['ratio'], rat.get(name)), '')
    if res.get('slow_env'):
        sl = res['slow_env']
        t.add_section()
        t.add_row(f"[bold]slow environment[/bold]: {sl['episodes']} episodes x {sl['turns']} calls, "
                  f"{sl['delay_s'] * 1000:.0f} ms a call ({sl['waits_seconds']:.1f} s of waits); "
                  f"trajectories identical: {sl['identical']}", '', '', '', '')
        t.add_row(f"  seconds: {sl['workers']} env workers | serial [bold](slow_env_serial_vs_pool)[/bold]",
                  _f(sl['pool_seconds'], ' s'), _f(sl['serial_seconds'], ' s'),
                  _ratio(sl['serial_vs_pool'], rat.get('slow_env_serial_vs_pool')), '')
    if hg is None:
        t.add_row(f"[bold]SFT step[/bold] (masked NLL + backward + AdamW, batch {tuple(st['shape'])})", '', '', '', '')
        t.add_row('  padded tokens/s', _f(st['tokens_per_s']), '-', '-', sft_gf)
    if eff:
        t.add_section()
        gm, ss, sp = eff['gemm'], eff['sft_step'], eff['sampling_step']
        t.add_row('[bold]vs this machine\'s GEMM peak[/bold] (analytic matmul FLOPs; ratio = GFLOP/s / GEMM '
                  'GFLOP/s, median (min-max) of interleaved pairs)', '', '', '', '')
        t.add_row(f"  fp32 GEMM {gm['n']}x{gm['n']} (probe GFLOP/s: "
                  + ', '.join(f'{n}: {g:.1f}' for n, g in gm['probe_gflops'].items()) + ')',
                  _f(gm['seconds'], ' s'), '', '', f"peak {gm['gflops']:.1f}")
        t.add_row(f"  SFT step {tuple(ss['shape'])}: {ss['flops'] / 1e9:.3f} GFLOP (3 x forward over "
                  f"{ss['computed_tokens']} computed tokens; {ss['real_tokens']} real, {ss['padded_tokens']} padded)",
                  _f(ss['seconds'], ' s'), '', _frac(rat.get('sft_step_peak_fraction')), sft_gf)
        t.add_row(f"  cached sampling step, batch {sp['batch']}, {sp['cached_len']} cached positions: "
                  f"{sp['flops'] / 1e6:.1f} MFLOP", _f(sp['seconds'], ' s'), '',
                  _frac(rat.get('sampling_step_peak_fraction')), sample)
    console.print(t)
    if hg is None:
        console.print(f"[yellow]{res.get('peer_skipped') or 'peer rows skipped'}[/yellow]")
    else:
        console.print(f"sampling_vs_hf counts our sampled policy tokens per second of rollout_batch wall time, which "
                      f"also covers the env steps, the prompt and tool-reply prefills ({sf['mean_tokens']:.0f} tokens "
                      f"per episode for {sf['mean_policy_tokens']:.0f} sampled) and a batch that shrinks as episodes "
                      f"end; GPT2.generate prefills a {hg['prompt_tokens']}-token prompt (the first tokens of our "
                      f"episodes) then samples {hg['new_tokens']} tokens on every row (top_k=0, temperature 1). "
                      f"Fastest attention kept: generate {_by(hg)}; SFT step {_by(hs)}.", highlight=False)
    console.print(f"ratios: {res.get('method', '')}. total {res['total_seconds']:.0f} s", highlight=False)


def _by(row):
    return ', '.join(f'{k} {v:.3f} s' for k, v in row['by_attn'].items())
