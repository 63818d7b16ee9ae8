DROP TABLE traffic;
