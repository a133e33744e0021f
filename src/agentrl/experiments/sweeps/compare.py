"""``agentrl compare A B [C ...]``: runs, sweeps or a grid's variants side by side.

Each argument is a ``reproduce`` folder (one seed), a ``sweep`` folder (its aggregated seeds) or a
``sweep --grid`` folder (each of its variants). The first variant is the baseline. For every
variant, ``compare`` reports

- each finding's hold rate over its seeds with its 95% Wilson interval (the chapter's bands on the environment that
  has them, then the chapter's claims; a claim that does not apply at a seed counts at none of them);
- the key figures (pass rates of every section, invalid calls, entropy, 15.2's held-out pass per
  task group, 15.6's probe and filters) as mean and 95% CI over seeds;
- for every other variant, its difference from the baseline with the 95% CI and two-sided p (``stats.versus``):
  paired by seed on the seeds both variants ran (the paired t-test, or ``--test wilcoxon`` the Wilcoxon
  signed-rank test), Welch's unequal-variance t-test where they share fewer than two; hold rates are tested as
  0/1 outcomes per seed. Each table's p-values are adjusted for its number of comparisons (``stats.holm``), and
  its header says which test ran and for how many comparisons;
- the settings that differ between variants, and the provenance records (version, commit, torch,
  threads, CPU) where they differ;

in the terminal (rich), in ``OUT/compare.md`` and ``OUT/compare.json``, and as ``OUT/compare.png``:
the four recipes' curves per variant with CI bands.

Figures are only comparable at equal budgets: ``compare`` refuses variants whose chapter budgets
(``config.BUDGETS``: steps, samples, rounds, evaluation intervals) differ, unless ``--allow KEY``
names every key that may. Recipe hyperparameters and model settings may always differ: they are
what an ablation changes.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..chapter15.tables import by_group
from ..run_folder import peek, transcript
from .compare_report import method, print_terminal, render


# --- loading

def _seed_record(folder: Path) -> dict | None:
    """One seed folder -> {'seed', 'folder', 'env', 'config', 'provenance', 'sections', 'findings', 'groups'}, or None
    if it has no results.

    ``findings``: the chapter's bands (on the environment that has them), then the chapter's claims (``claim: KEY``;
    verdict None where one does not apply), on the run's environment; ValueError when that cannot be found here."""
    from ..chapter15.claims import check_claims
    from ..chapter15.env_registry import DEFAULT, get_env
    saved = peek(folder / 'results.json')
    if not saved or 'sections' not in saved:
        return None
    name = saved.get('env', DEFAULT)
    try:
        env = get_env(name)
    except ValueError as e:
        raise ValueError(f'{folder} ran on an environment not found here: {e}') from None
    rl = 'rl' in saved['sections']  # sweep --rl: 15.2 and one RL recipe, neither the chapter's bands nor its claims
    bands = env.bands(transcript(folder, saved)) if env.bands and not rl else []
    claims = [] if rl else [replace(f, key=f'claim: {f.key}') for f in check_claims(saved['sections'], env)]
    return {'seed': saved.get('seed'), 'folder': str(folder), 'env': name, 'config': saved.get('config') or {},
            'provenance': saved.get('provenance') or {}, 'sections': saved['sections'], 'findings': bands + claims,
            'groups': saved.get('groups') or env.groups()}


def _sweep_variant(folder: Path, name: str) -> dict:
    sweep = peek(folder / 'sweep.json')
    seeds = sweep.get('aggregated_seeds', []) if sweep else []
    records = [r for r in (_seed_record(folder / f'seed{s}') for s in seeds) if r]
    if not records:
        raise ValueError(f'{folder}: sweep.json lists no finished seed with a results.json')
    return {'name': name, 'path': str(folder), 'kind': 'sweep', 'config': sweep.get('config') or records[0]['config'],
            'overrides': sweep.get('overrides', {}), 'records': records}


def load(path) -> list:
    """A run, sweep or grid folder -> its variants: [{'name', 'path', 'kind', 'config', 'overrides', 'records'}]."""
    folder = Path(path)
    if (folder / 'grid.json').is_file():
        grid = peek(folder / 'grid.json') or {}
        return [_sweep_variant(folder / v['folder'], name) for name, v in grid.get('variants', {}).items()]
    if (folder / 'sweep.json').is_file():
        return [_sweep_variant(folder, folder.name)]
    record = _seed_record(folder)
    if record is None:
        raise ValueError(f'{folder} is not a run, sweep or grid folder (no results.json, sweep.json or grid.json)')
    return [{'name': folder.name, 'path': str(folder), 'kind': 'run', 'config': record['config'],
             'overrides': record['provenance'].get('overrides', {}), 'records': [record]}]


def load_all(paths) -> list:
    variants = [v for p in paths for v in load(p)]
    names = [v['name'] for v in variants]
    for v in variants:  # two folders with the same last name: tell them apart by path
        if names.count(v['name']) > 1:
            v['name'] = v['path']
    if len(variants) < 2:
        raise ValueError('compare needs at least two variants (two folders, or one grid folder with two variants)')
    return variants


# --- checks

def check_budgets(variants: list, allow=()) -> list:
    """Refuse variants whose budgets differ on a key not in ``allow`` (ValueError naming them) -> differing settings.

    Returns every setting that differs between variants, as [(key, [value per variant])].
    """
    from ..chapter15.config import BUDGETS, knobs, unknown_key
    from ..chapter15.settings import flat
    envs = [{r['env'] for r in v['records']} for v in variants]
    if len(set().union(*envs)) > 1:
        detail = '; '.join(f"{v['name']} on {', '.join(sorted(e))}" for v, e in zip(variants, envs))
        raise ValueError(f'the variants ran on different environments ({detail}): their figures are not comparable; '
                         'compare runs of one environment')
    for key in allow:
        if key not in knobs():
            raise unknown_key(key, ' in --allow')
    configs = [flat(v['config']) for v in variants]
    keys = sorted({k for c in configs for k in c} - {'model.vocab_size'}, key=lambda k: (k not in BUDGETS, k))
    differing = [(k, [c.get(k) for c in configs]) for k in keys if len({json.dumps(c.get(k)) for c in configs}) > 1]
    bad = [(k, vals) for k, vals in differing if k in BUDGETS and k not in allow]
    if bad:
        detail = '; '.join(f"{k} ({', '.join(str(v['name']) + ' ' + str(x) for v, x in zip(variants, vals))})" for k, vals in bad)
        raise ValueError(f'the variants ran with different chapter budgets: {detail}. Their figures are not comparable; '
                         f"pass --allow {','.join(k for k, _ in bad)} to compare them anyway")
    return differing


# --- what is compared

def _last(seq, key):
    return seq[-1][key]


def _probe(R, role: int, figure: str):
    """15.6's probe figure of an SFT checkpoint by its role (0: the cold start, 1: the last step), whatever its step."""
    from ..chapter15.probes import probe_roles
    return R['15.6']['probe'][probe_roles(R['15.6']['probe'])[role]][figure]


def key_figures(groups=(), cold: str = 'SFT step 20', last: str = 'SFT step 60') -> list:
    """[(section, label, fn(sections) -> number)]: the figures ``compare`` sets side by side (``groups``: the task
    groups whose held-out pass after oracle SFT is one of them; ``cold``, ``last``: how the labels name the two
    SFT checkpoints 15.6 probes, which each run's figures are found by role)."""
    from ..chapter15.figures import RECIPES
    figs = [('15.2', 'weak base: train pass', lambda R: R['15.2']['weak']['train']),
            ('15.2', 'weak base: held-out pass', lambda R: R['15.2']['weak']['held']),
            ('15.2', 'weak base: invalid calls / episode', lambda R: R['15.2']['weak']['invalid']),
            ('15.2', 'weak base: action entropy', lambda R: R['15.2']['weak']['entropy']),
            ('15.2', 'oracle SFT: train pass', lambda R: R['15.2']['oracle_sft']['train']),
            ('15.2', 'oracle SFT: held-out pass', lambda R: R['15.2']['oracle_sft']['held']),
            ('15.2', 'oracle SFT: invalid calls / episode', lambda R: R['15.2']['oracle_sft']['invalid']),
            ('15.2', 'oracle SFT: action entropy', lambda R: R['15.2']['oracle_sft']['entropy'])]
    figs += [('15.2', f'oracle SFT held-out pass, family {f}', lambda R, f=f: R['15.2']['heldout_by_family'][f]) for f in groups]
    figs += [('15.3', 'after RFT: train pass', lambda R: R['15.3']['after_rft']['train']),
             ('15.3', 'after RFT: held-out pass', lambda R: R['15.3']['after_rft']['held']),
             ('15.4', 'DPO, last step: train pass', lambda R: _last(R['15.4']['log'], 'train')),
             ('15.4', 'DPO, last step: held-out pass', lambda R: _last(R['15.4']['log'], 'held')),
             ('15.4', 'DPO, last step: invalid calls / episode', lambda R: _last(R['15.4']['log'], 'invalid'))]
    for name in RECIPES:
        figs += [('15.5', f'{name}: final train pass', lambda R, n=name: R['15.5']['curves'][n][-1][1]),
                 ('15.5', f'{name}: final held-out pass', lambda R, n=name: R['15.5']['curves'][n][-1][2])]
    figs += [('15.5', f'{name}: final train episodes that read first', lambda R, n=name: R['15.5']['reads_first'][n])
             for name in ('SFT -> RL', 'RL only')]
    figs += [('15.6', f'probe, {cold} (cold start): groups with signal', lambda R: _probe(R, 0, 'signal')),
             ('15.6', f'probe, {last} (last): groups with signal', lambda R: _probe(R, 1, 'signal')),
             ('15.6', f'probe, {cold} (cold start): action entropy', lambda R: _probe(R, 0, 'entropy')),
             ('15.6', 'mismatch: train pass', lambda R: R['15.6']['mismatch']['train']),
             ('15.6', 'mismatch: NLL on rendered demos', lambda R: R['15.6']['mismatch']['nll']),
             ('15.6', 'DPO + NLL, last step: invalid calls / episode', lambda R: _last(R['15.6']['dpo_nll_log'], 'invalid')),
             ('15.6', 'public filter, last round: public pass', lambda R: _last(R['15.6']['hacking'], 'public')),
             ('15.6', 'public filter, last round: hidden pass', lambda R: _last(R['15.6']['hacking'], 'hidden'))]
    return figs


def _rl_figures(variants) -> list:
    """The figures of the section ``rl`` (``sweep --rl``; ``rl_section.rl_figures``) the variants' runs have, each
    once, in order -> [(label, path)]."""
    from ..chapter15.rl_section import rl_figures
    seen = {}
    for v in variants:
        for r in v['records']:
            if 'rl' in r['sections']:
                seen.update({label: path for label, path in rl_figures(r['sections']['rl']) if label not in seen})
    return list(seen.items())


def _walk(sections: dict, path: tuple):
    """The value at ``path`` (keys) in a run's sections."""
    for key in path:
        sections = sections[key]
    return sections


def _values(records, fn) -> dict:
    """{seed: fn(sections)} over the records where the figure is a number."""
    out = {}
    for r in records:
        try:
            v = fn(r['sections'])
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[_seed(r)] = float(v)
    return out


def _seed(record):
    """What pairs a record with another variant's: its seed (a record without one pairs with none)."""
    return record['seed'] if record['seed'] is not None else f"{record['folder']} (no seed)"


def _row(per_variant: list, test: str) -> dict:
    """One figure or finding: per variant its values and seeds and their summary, and each other variant against the
    first (``stats.versus``: paired by seed where they share seeds)."""
    from .stats import summarize, versus
    return {'values': [list(v.values()) for v in per_variant], 'seeds': [list(v) for v in per_variant],
            'stats': [summarize(v.values()) if v else None for v in per_variant],
            'vs_first': [versus(per_variant[0], v, test) if v and per_variant[0] else None for v in per_variant[1:]]}


def adjust(rows: list) -> int:
    """Holm's adjustment over one table: every test of every row gets ``p_holm`` -> how many p-values it adjusted."""
    from .stats import holm
    tests = [t for r in rows for t in r['vs_first'] if t]
    for t, q in zip(tests, holm([t['p'] for t in tests])):
        t['p_holm'] = q
    return sum(t['p'] is not None for t in tests)


def compare(variants: list, test: str = 't') -> dict:
    """Per finding and key figure: each variant's summary, and each other variant against the first (``test``: the
    paired test, a key of ``stats.TESTS``), with the p-values of each table adjusted by Holm's method."""
    from .stats import TESTS, aggregate
    if test not in TESTS:
        raise ValueError(f'unknown test {test!r}; valid tests are {list(TESTS)}')
    findings, na = {}, {}
    for v in variants:
        for rec in v['records']:
            for f in rec['findings']:
                findings.setdefault(f.key, [{} for _ in variants])
                na.setdefault(f.key, [0] * len(variants))
    for i, v in enumerate(variants):
        for rec in v['records']:
            for f in rec['findings']:
                if f.verdict is None:  # a claim that does not apply at this seed counts at none
                    na[f.key][i] += 1
                else:
                    findings[f.key][i][_seed(rec)] = 1.0 if f.verdict else 0.0
    figures = []
    record = variants[0]['records'][0]
    first = record['sections']['15.2'].get('heldout_by_family') or {}

    def steps(key, default):  # the SFT checkpoints' steps, as the variants' configs set them
        return 'SFT step ' + ' / '.join(dict.fromkeys(str(r['config'].get(key, default)) for v in variants for r in v['records']))
    for section, label, fn in key_figures(list(by_group(first, record['groups'])), steps('cold_start_step', 20),
                                          steps('sft_steps', 60)):
        vals = [_values(v['records'], fn) for v in variants]
        if any(vals):
            figures.append({'section': section, 'figure': label, **_row(vals, test)})
    for label, path in _rl_figures(variants):
        vals = [_values(v['records'], lambda R, p=path: _walk(R, p)) for v in variants]
        if any(vals):
            figures.append({'section': 'rl', 'figure': label, **_row(vals, test)})
    finding_rows = [{'finding': name, **_row(vals, test), 'not_applicable': na[name]} for name, vals in findings.items()]
    return {'variants': [{'name': v['name'], 'path': v['path'], 'kind': v['kind'], 'overrides': v['overrides'],
                          'seeds': [r['seed'] for r in v['records']]} for v in variants],
            'test': test, 'adjustment': 'holm',
            'comparisons': {'findings': adjust(finding_rows), 'figures': adjust(figures)},
            'findings': finding_rows, 'figures': figures,
            'curves': {v['name']: aggregate({r['seed']: r['sections'] for r in v['records']})[0] for v in variants}}


def provenance_rows(variants) -> list:
    keys = ['agentrl', 'git_commit', 'git_dirty', 'torch', 'torch_threads', 'cpu', 'python']
    rows = []
    for k in keys:
        vals = [', '.join(sorted({str(r['provenance'].get(k, '—')) for r in v['records']})) for v in variants]
        if len(set(vals)) > 1:
            rows.append((k, *vals))
    return rows


# --- command line

def add_parser(sub):
    """Register ``agentrl compare`` on an argparse subparsers object."""
    p = sub.add_parser('compare', help='runs, sweeps or a grid side by side: hold rates, key figures with 95%% CI, '
                       'differences paired by seed (Holm-adjusted p), the recipe curves per variant',
                       description=__doc__.split('\n\n')[0])
    p.add_argument('dirs', nargs='+', metavar='DIR', help='reproduce, sweep or sweep --grid folders; the first variant is the baseline')
    p.add_argument('--allow', action='append', default=[], metavar='KEY[,KEY]',
                   help='budget keys that may differ between the variants (default: none may)')
    p.add_argument('--test', default='t', choices=['t', 'wilcoxon'],
                   help='the test of a difference paired by seed: the paired t-test (t, the default) or the Wilcoxon '
                   "signed-rank test (wilcoxon); variants that share fewer than two seeds get Welch's t-test")
    p.add_argument('--out', default=None, help='where compare.md, compare.json and compare.png go '
                   '(default: the folder given, if one; else runs/compare)')
    p.set_defaults(func=main)
    return p


def run(dirs, allow=(), out=None, console=None, test: str = 't') -> dict:
    """Load, check, compare (``test``: the paired test, ``stats.TESTS``), write compare.md / compare.json /
    compare.png (and print) -> the result dict."""
    from .figures import fig_compare, fig_rl_compare
    variants = load_all(dirs)
    settings = check_budgets(variants, allow)
    result = compare(variants, test)
    prov = provenance_rows(variants)
    out = Path(out) if out else (Path(dirs[0]) if len(dirs) == 1 else Path('runs/compare'))
    out.mkdir(parents=True, exist_ok=True)
    rl = any('rl' in r['sections'] for v in variants for r in v['records'])
    draw = fig_rl_compare if rl else fig_compare
    fig = draw(result['curves'], out / 'compare.png') if any(result['curves'].values()) else None
    (out / 'compare.md').write_text(render(result, settings, prov, fig.name if fig else None))
    saved = {**{k: v for k, v in result.items() if k != 'curves'},
             'methods': {part: method(result, part) for part in ('findings', 'figures')}}
    (out / 'compare.json').write_text(json.dumps({**saved, 'settings': settings, 'provenance_differs': prov}, indent=1))
    if console is not None:
        print_terminal(result, settings, prov, console)
        console.print(f"{out / 'compare.md'}, compare.json" + (', compare.png' if fig else ''), markup=False, highlight=False)
    return result


def main(args) -> int:
    import sys
    allow = [k.strip() for item in args.allow for k in item.split(',') if k.strip()]
    from ...runtime.terminal import console as new_console
    try:
        run(args.dirs, allow, args.out, new_console(), args.test)
    except ValueError as e:
        print(f'agentrl compare: error: {e}', file=sys.stderr)
        return 2
    return 0
