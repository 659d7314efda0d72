"""Best Artworks of All Time as Kaggle ships it: the real folder names of all 50 artists
(Dürer's mojibake included), both image layouts, and artists that match no row (never silent)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import invoke
from PIL import Image

from laya_cli.data.datasets import DataSettings, load_dataset, repair_mojibake

# artists.csv (name, first genre) of the Kaggle dataset, in its order
ARTISTS = [
    ("Amedeo Modigliani", "Expressionism"),
    ("Vasiliy Kandinskiy", "Expressionism"),
    ("Diego Rivera", "Social Realism"),
    ("Claude Monet", "Impressionism"),
    ("Rene Magritte", "Surrealism"),
    ("Salvador Dali", "Surrealism"),
    ("Edouard Manet", "Realism"),
    ("Andrei Rublev", "Byzantine Art"),
    ("Vincent van Gogh", "Post-Impressionism"),
    ("Gustav Klimt", "Symbolism"),
    ("Hieronymus Bosch", "Northern Renaissance"),
    ("Kazimir Malevich", "Suprematism"),
    ("Mikhail Vrubel", "Symbolism"),
    ("Pablo Picasso", "Cubism"),
    ("Peter Paul Rubens", "Baroque"),
    ("Pierre-Auguste Renoir", "Impressionism"),
    ("Francisco Goya", "Romanticism"),
    ("Frida Kahlo", "Primitivism"),
    ("El Greco", "Mannerism"),
    ("Albrecht Dürer", "Northern Renaissance"),
    ("Alfred Sisley", "Impressionism"),
    ("Pieter Bruegel", "Northern Renaissance"),
    ("Marc Chagall", "Primitivism"),
    ("Giotto di Bondone", "Proto Renaissance"),
    ("Sandro Botticelli", "Early Renaissance"),
    ("Caravaggio", "Baroque"),
    ("Leonardo da Vinci", "High Renaissance"),
    ("Diego Velazquez", "Baroque"),
    ("Henri Matisse", "Impressionism"),
    ("Jan van Eyck", "Northern Renaissance"),
    ("Edgar Degas", "Impressionism"),
    ("Rembrandt", "Baroque"),
    ("Titian", "High Renaissance"),
    ("Henri de Toulouse-Lautrec", "Post-Impressionism"),
    ("Gustave Courbet", "Realism"),
    ("Camille Pissarro", "Impressionism"),
    ("William Turner", "Romanticism"),
    ("Edvard Munch", "Symbolism"),
    ("Paul Cezanne", "Post-Impressionism"),
    ("Eugene Delacroix", "Romanticism"),
    ("Henri Rousseau", "Primitivism"),
    ("Georges Seurat", "Post-Impressionism"),
    ("Paul Klee", "Expressionism"),
    ("Piet Mondrian", "Neoplasticism"),
    ("Joan Miro", "Surrealism"),
    ("Andy Warhol", "Pop Art"),
    ("Paul Gauguin", "Symbolism"),
    ("Raphael", "High Renaissance"),
    ("Michelangelo", "High Renaissance"),
    ("Jackson Pollock", "Abstract Expressionism"),
]
DURER_ON_DISK = "Albrecht_Du\u2560\u00earer"  # 'Albrecht_Du╠êrer': NFD 'ü' as UTF-8 bytes, read as cp437
DURER_TWICE = "Albrecht_Du\u0393\u00f2\u00e1\u251c\u00acrer"  # 'Albrecht_DuΓòá├¬rer': the same, once more


def kaggle_folder(name: str) -> str:
    return DURER_ON_DISK if name == "Albrecht Dürer" else name.replace(" ", "_")


def write_csv(root):
    rows = "".join(
        f'{i},{name},1400 - 1500,"{genre}",X,bio,http://x,{10 + i}\n' for i, (name, genre) in enumerate(ARTISTS)
    )
    (root / "artists.csv").write_text(
        "id,name,years,genre,nationality,bio,wikipedia,paintings\n" + rows, encoding="utf-8"
    )


def write_image(path, seed):
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(path)


@pytest.fixture()
def kaggle(tmp_path):
    """images/images/<Artist>/<Artist>_N.jpg and resized/resized/<Artist>_N.jpg, 2 images each."""
    root = tmp_path / "best-artworks"
    root.mkdir()
    write_csv(root)
    for i, (name, _) in enumerate(ARTISTS):
        folder = kaggle_folder(name)
        (root / "images" / "images" / folder).mkdir(parents=True)
        for n in (1, 2):
            write_image(root / "images" / "images" / folder / f"{folder}_{n}.jpg", 10 * i + n)
    return root


def test_mojibake_is_repaired_to_nfc():
    assert repair_mojibake(DURER_ON_DISK) == "Albrecht_Dürer"
    assert repair_mojibake(DURER_TWICE) == "Albrecht_Dürer"
    assert repair_mojibake("Albrecht_DuÔòá├¬rer") == "Albrecht_Dürer"  # cp850 rather than cp437
    for fine in ("Joan_Miró", "Vincent_van_Gogh", "Henri_de_Toulouse-Lautrec", "Dürer"):
        assert repair_mojibake(fine) == fine


def test_all_50_artists_of_the_kaggle_folders_match(kaggle, capsys):
    by_artist = load_dataset(DataSettings("artworks", data_dir=str(kaggle), image_size=8, label="artist"))
    assert len(by_artist.classes) == 50 and "Albrecht_Dürer" in by_artist.classes and not by_artist.unmatched
    assert len(by_artist.train) + len(by_artist.val) + len(by_artist.test) == 100
    by_genre = load_dataset(DataSettings("artworks", data_dir=str(kaggle), image_size=8))
    assert by_genre.classes == sorted({g for _, g in ARTISTS}) and not by_genre.unmatched
    assert len(by_genre.train) + len(by_genre.val) + len(by_genre.test) == 100  # Dürer's 2 images kept
    assert "warning" not in capsys.readouterr().err


def test_resized_layout(tmp_path):
    root = tmp_path / "art"
    root.mkdir()
    write_csv(root)
    flat = root / "resized" / "resized"
    flat.mkdir(parents=True)
    for i, (name, _) in enumerate(ARTISTS[:20]):
        for n in (1, 2, 3):
            write_image(flat / f"{kaggle_folder(name)}_{n}.jpg", i * 3 + n)
    data = load_dataset(DataSettings("artworks", data_dir=str(root), image_size=8, label="artist"))
    assert len(data.classes) == 20 and "Albrecht_Dürer" in data.classes and not data.unmatched
    assert len(data.train) + len(data.val) + len(data.test) == 60


def test_unmatched_and_duplicate_folders_are_named_and_counted(kaggle, tmp_path, capsys):
    images = kaggle / "images" / "images"
    (images / DURER_TWICE).mkdir()
    write_image(images / DURER_TWICE / "x_1.jpg", 999)
    (images / "Unknown_Painter").mkdir()
    for n in (1, 2):
        write_image(images / "Unknown_Painter" / f"Unknown_Painter_{n}.jpg", 1000 + n)
    data = load_dataset(DataSettings("artworks", data_dir=str(kaggle), image_size=8))
    err = " ".join(capsys.readouterr().err.split())
    assert data.unmatched == ["Unknown_Painter"]
    assert "1 artist folder(s) match no row of artists.csv" in err and "'Unknown_Painter'" in err
    assert "second copy of Albrecht_Dürer" in err
    assert len(data.train) + len(data.val) + len(data.test) == 100

    out = tmp_path / "m.pt"
    res = invoke(
        "train", "--dataset", "artworks", "--data-dir", kaggle, "--image-size", "8", "--epochs", "1", "--out", out, "-q"
    )
    assert res.exit_code == 0, res.output
    assert "Unknown_Painter" in res.output  # the warning is shown even with -q
    info = json.loads(invoke("info", out, "--json").output)
    assert info["dataset"]["unmatched"] == ["Unknown_Painter"]
    panel = invoke("info", out).output
    assert "unmatched" in panel and "Unknown_Painter" in panel
