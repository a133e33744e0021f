"""``atomic_path``: a file or folder is written whole or not at all."""
import os

import pytest

from agentrl.runtime.files import atomic_path


def test_a_file_appears_only_when_the_block_ends(tmp_path):
    target = tmp_path / 'deep' / 'out.json'
    with atomic_path(target) as tmp:
        tmp.write_text('new')
        assert not target.exists()  # nothing at the target while it is written
        assert tmp.parent == target.parent and str(os.getpid()) in tmp.name
    assert target.read_text() == 'new'
    assert os.listdir(target.parent) == ['out.json']  # no temporary left


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / 'out.json'
    target.write_text('old')
    with pytest.raises(RuntimeError, match='killed'):
        with atomic_path(target) as tmp:
            tmp.write_text('half')
            raise RuntimeError('killed while writing')
    assert target.read_text() == 'old'
    assert os.listdir(tmp_path) == ['out.json']


def test_a_folder_replaces_the_old_folder_whole(tmp_path):
    target = tmp_path / 'model'
    target.mkdir()
    (target / 'stale.bin').write_text('old')
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / 'config.json').write_text('{}')
    assert sorted(os.listdir(target)) == ['config.json']
    assert os.listdir(tmp_path) == ['model']


def test_a_leftover_temporary_of_a_killed_process_is_cleared(tmp_path):
    target = tmp_path / 'out.json'
    leftover = target.with_name(f'{target.name}.{os.getpid()}.tmp')
    leftover.mkdir()  # a folder where this process now writes a file
    with atomic_path(target) as tmp:
        tmp.write_text('new')
    assert target.read_text() == 'new' and not leftover.exists()
